package cdplugin

import (
	"strings"

	"k8s.io/apimachinery/pkg/types"
)

func contains(s, sub string) bool { return strings.Contains(s, sub) }

func typesUID(s string) types.UID { return types.UID(s) }
