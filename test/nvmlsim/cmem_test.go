package nvmlsim

import (
	"testing"
	"unsafe"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/stretchr/testify/require"
)

func TestStoreString(t *testing.T) {
	for _, tc := range []struct {
		name   string
		length uint32
		in     string
		ret    nvml.Return
		want   nvml.Return
		buf    string
	}{
		{"fits", 8, "abc", nvml.SUCCESS, nvml.SUCCESS, "abc\x00xxxx"},
		{"exactly", 4, "abc", nvml.SUCCESS, nvml.SUCCESS, "abc\x00xxxx"},
		{"no room for the NUL", 3, "abc", nvml.SUCCESS, nvml.ERROR_INSUFFICIENT_SIZE, "xxxxxxxx"},
		{"error passes through", 8, "abc", nvml.ERROR_NOT_SUPPORTED, nvml.ERROR_NOT_SUPPORTED, "xxxxxxxx"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			buf := []byte("xxxxxxxx")
			require.Equal(t, tc.want, storeString(unsafe.Pointer(&buf[0]), tc.length, tc.in, tc.ret))
			require.Equal(t, tc.buf, string(buf))
		})
	}
	require.Equal(t, nvml.ERROR_INVALID_ARGUMENT, storeString(nil, 8, "a", nvml.SUCCESS))
}

func TestStore(t *testing.T) {
	var v uint32 = 7
	require.Equal(t, nvml.ERROR_NOT_FOUND, store(unsafe.Pointer(&v), uint32(1), nvml.ERROR_NOT_FOUND))
	require.EqualValues(t, 7, v, "not written on error")
	require.Equal(t, nvml.SUCCESS, store(unsafe.Pointer(&v), uint32(1), nvml.SUCCESS))
	require.EqualValues(t, 1, v)
	require.Equal(t, nvml.ERROR_INVALID_ARGUMENT, store(nil, uint32(1), nvml.SUCCESS))
}

func TestLoadString(t *testing.T) {
	b := []byte("GPU-1234\x00tail")
	s, ok := loadString(unsafe.Pointer(&b[0]))
	require.True(t, ok)
	require.Equal(t, "GPU-1234", s)
	long := make([]byte, maxCString+1)
	for i := range long {
		long[i] = 'a'
	}
	_, ok = loadString(unsafe.Pointer(&long[0]))
	require.False(t, ok, "unterminated within the bound")
	_, ok = loadString(nil)
	require.False(t, ok)
}

func TestStoreArray(t *testing.T) {
	pl := []nvml.GpuInstancePlacement{{Start: 0, Size: 4}, {Start: 4, Size: 4}}
	var n uint32
	require.Equal(t, nvml.SUCCESS, storeArray(nil, unsafe.Pointer(&n), pl), "NULL array: count only")
	require.EqualValues(t, 2, n)

	out := make([]nvml.GpuInstancePlacement, 1)
	n = 1
	require.Equal(t, nvml.ERROR_INSUFFICIENT_SIZE, storeArray(unsafe.Pointer(&out[0]), unsafe.Pointer(&n), pl))
	require.EqualValues(t, 2, n)

	out = make([]nvml.GpuInstancePlacement, 3)
	n = 3
	require.Equal(t, nvml.SUCCESS, storeArray(unsafe.Pointer(&out[0]), unsafe.Pointer(&n), pl))
	require.EqualValues(t, 2, n)
	require.Equal(t, pl, out[:2])
	require.Equal(t, nvml.ERROR_INVALID_ARGUMENT, storeArray[nvml.GpuInstancePlacement](nil, nil, pl))
}

func TestStoreHandles(t *testing.T) {
	out := make([]uintptr, 2)
	n := uint32(2)
	require.Equal(t, nvml.SUCCESS, storeHandles(unsafe.Pointer(&out[0]), unsafe.Pointer(&n), []uintptr{16, 32}))
	require.Equal(t, []uintptr{16, 32}, out)
	n = 1
	require.Equal(t, nvml.ERROR_INSUFFICIENT_SIZE, storeHandles(unsafe.Pointer(&out[0]), unsafe.Pointer(&n), []uintptr{1, 2}))
	require.EqualValues(t, 2, n)
	n = 4
	require.Equal(t, nvml.SUCCESS, storeHandles(nil, unsafe.Pointer(&n), nil))
	require.EqualValues(t, 0, n)
	require.Equal(t, nvml.ERROR_INVALID_ARGUMENT, storeHandles(nil, nil, nil))
}

func TestToCChars(t *testing.T) {
	var name [8]int8
	toCChars(name[:], "MIG 1g.10gb")
	require.Equal(t, "MIG 1g.", cString(name[:]), "truncated, NUL-terminated")
}

// TestMirrorLayout: the C layout of the structs with handles
// (nvmlEventData_t, nvmlGpuInstanceInfo_t, nvmlComputeInstanceInfo_t on
// LP64). The library test checks them end to end through go-nvml.
func TestMirrorLayout(t *testing.T) {
	require.EqualValues(t, 32, unsafe.Sizeof(cEventData{}))
	require.EqualValues(t, 24, unsafe.Offsetof(cEventData{}.GpuInstanceId))
	require.EqualValues(t, 24, unsafe.Sizeof(cGpuInstanceInfo{}))
	require.EqualValues(t, 16, unsafe.Offsetof(cGpuInstanceInfo{}.Placement))
	require.EqualValues(t, 32, unsafe.Sizeof(cComputeInstanceInfo{}))
	require.EqualValues(t, 24, unsafe.Offsetof(cComputeInstanceInfo{}.Placement))
}

func cString(b []int8) string {
	var s []byte
	for _, c := range b {
		if c == 0 {
			break
		}
		s = append(s, byte(c))
	}
	return string(s)
}
