package fmsim

import (
	"net"
	"os"
	"path/filepath"
	"testing"
	"unsafe"

	"github.com/NVIDIA/go-nvfm/pkg/nvfm"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpudra/gpudra/test/nvmlsim"
)

// newLibRoot makes a fake driver root with profile and a listening socket.
func newLibRoot(t *testing.T, profile string) (root, socket string) {
	t.Helper()
	root, err := os.MkdirTemp("", "fm")
	require.NoError(t, err)
	t.Cleanup(func() { _ = os.RemoveAll(root) })
	require.NoError(t, nvmlsim.WriteConfig(root, nvmlsim.Config{Profile: profile, Node: "node-a"}))
	socket = filepath.Join(root, SocketPath)
	require.NoError(t, os.MkdirAll(filepath.Dir(socket), 0o755))
	l, err := net.Listen("unix", socket)
	require.NoError(t, err)
	t.Cleanup(func() { _ = l.Close() })
	return root, socket
}

func params(address string, unix bool) nvfm.ConnectParams {
	p := nvfm.ConnectParams{Version: nvfm.ConnectParamsVersion, AddressType: nvfm.ADDR_TYPE_INET}
	if unix {
		p.AddressIsUnixSocket, p.AddressType = 1, nvfm.ADDR_TYPE_UNIX
	}
	for i := range len(address) {
		p.AddressInfo[i] = int8(address[i])
	}
	return p
}

// TestLibraryCalls: the C-facing checks of the library in process: calls
// before fmLibInit, a second fmLibInit, nil pointers, struct versions,
// unknown handles, a root that cannot be found.
func TestLibraryCalls(t *testing.T) {
	root, socket := newLibRoot(t, "dgx-h100")
	lib := New(func(string) string { return root }, func() []string { return nil })
	var h uintptr
	p := params(socket, true)
	assert.Equal(t, nvfm.UNINITIALIZED, lib.Connect(unsafe.Pointer(&p), unsafe.Pointer(&h)))
	assert.Equal(t, nvfm.UNINITIALIZED, lib.Shutdown())
	require.Equal(t, nvfm.SUCCESS, lib.Init())
	assert.Equal(t, nvfm.IN_USE, lib.Init())

	assert.Equal(t, nvfm.BADPARAM, lib.Connect(nil, unsafe.Pointer(&h)))
	old := p
	old.Version = nvfm.ConnectV1ParamsVersion
	assert.Equal(t, nvfm.VERSION_MISMATCH, lib.Connect(unsafe.Pointer(&old), unsafe.Pointer(&h)))
	empty := params("", true)
	assert.Equal(t, nvfm.BADPARAM, lib.Connect(unsafe.Pointer(&empty), unsafe.Pointer(&h)))
	require.Equal(t, nvfm.SUCCESS, lib.Connect(unsafe.Pointer(&p), unsafe.Pointer(&h)))
	assert.NotZero(t, h)

	var list nvfm.FabricPartitionList
	assert.Equal(t, nvfm.VERSION_MISMATCH, lib.GetSupportedFabricPartitions(h, unsafe.Pointer(&list)), "no version set")
	list.Version = nvfm.FabricPartitionListVersion
	assert.Equal(t, nvfm.NOT_SUPPORTED, lib.GetSupportedFabricPartitions(h, unsafe.Pointer(&list)), "dgx-h100 runs no FM")
	assert.Equal(t, nvfm.BADPARAM, lib.GetSupportedFabricPartitions(h+1, unsafe.Pointer(&list)), "unknown handle")
	assert.Equal(t, nvfm.BADPARAM, lib.GetSupportedFabricPartitions(h, nil))
	var ids nvfm.ActivatedFabricPartitionList
	assert.Equal(t, nvfm.VERSION_MISMATCH, lib.SetActivatedFabricPartitions(h, unsafe.Pointer(&ids)))

	require.Equal(t, nvfm.SUCCESS, lib.Disconnect(h))
	assert.Equal(t, nvfm.BADPARAM, lib.Disconnect(h))
	require.Equal(t, nvfm.SUCCESS, lib.Shutdown())

	lost := New(func(string) string { return "" }, func() []string { return []string{"/nonexistent/libnvfm.so"} })
	assert.Equal(t, nvfm.GENERIC_ERROR, lost.Init())
}
