package cdplugin

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gpudra/gpudra/internal/plugin/computedomain"
)

func contains(s, sub string) bool { return strings.Contains(s, sub) }

func typesUID(s string) types.UID { return types.UID(s) }

// prepared is what node holds (its records).
func prepared(t *testing.T, ctx context.Context, node *computedomain.Node) []computedomain.PreparedClaim {
	t.Helper()
	got, err := node.Prepared(ctx)
	require.NoError(t, err)
	return got
}
