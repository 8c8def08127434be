package health

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestOnXID: every XID is passed on with its GPU, ignored ones included.
func TestOnXID(t *testing.T) {
	f := newPersistFixture(t, newDriver)
	type seen struct {
		uuid string
		xid  uint64
	}
	var got []seen
	f.mon.OnXID(func(uuid string, xid uint64) { got = append(got, seen{uuid, xid}) })
	f.xid(t, 1, 13) // ignored by default
	f.xid(t, 0, 63) // degraded
	assert.Equal(t, []seen{{f.gpus[1].UUID, 13}, {f.gpus[0].UUID, 63}}, got)
	assert.Equal(t, Healthy, f.mon.Snapshot().Health(f.gpus[1].UUID), "ignored all the same")
}
