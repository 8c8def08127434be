package nvmlsim

import (
	"unsafe"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// Memory the C caller passes in. Out-parameters are written through the
// go-nvml struct types, which are cgo -godefs mirrors of NVML's C structs.
// The structs that hold handles are mirrored here with uintptr handles
// (go-nvml's own mirrors are unexported): the library never writes a Go
// pointer into the caller's memory.

// cEventData is nvmlEventData_t.
type cEventData struct {
	Device            uintptr
	EventType         uint64
	EventData         uint64
	GpuInstanceId     uint32
	ComputeInstanceId uint32
}

// cGpuInstanceInfo is nvmlGpuInstanceInfo_t.
type cGpuInstanceInfo struct {
	Device    uintptr
	Id        uint32
	ProfileId uint32
	Placement nvml.GpuInstancePlacement
}

// cComputeInstanceInfo is nvmlComputeInstanceInfo_t.
type cComputeInstanceInfo struct {
	Device      uintptr
	GpuInstance uintptr
	Id          uint32
	ProfileId   uint32
	Placement   nvml.ComputeInstancePlacement
}

// store writes v through p when ret is SUCCESS. A nil p is
// ERROR_INVALID_ARGUMENT, as in NVML.
func store[T any](p unsafe.Pointer, v T, ret nvml.Return) nvml.Return {
	if p == nil {
		return nvml.ERROR_INVALID_ARGUMENT
	}
	if ret == nvml.SUCCESS {
		*(*T)(p) = v
	}
	return ret
}

// storeString copies s and a NUL into the caller's buffer of length bytes:
// ERROR_INSUFFICIENT_SIZE when it does not fit.
func storeString(buf unsafe.Pointer, length uint32, s string, ret nvml.Return) nvml.Return {
	if buf == nil {
		return nvml.ERROR_INVALID_ARGUMENT
	}
	if ret != nvml.SUCCESS {
		return ret
	}
	if uint64(len(s))+1 > uint64(length) {
		return nvml.ERROR_INSUFFICIENT_SIZE
	}
	dst := unsafe.Slice((*byte)(buf), len(s)+1)
	copy(dst, s)
	dst[len(s)] = 0
	return nvml.SUCCESS
}

// maxCString bounds the C strings read from the caller (UUIDs, bus IDs).
const maxCString = 256

// loadString reads a NUL-terminated string of at most maxCString bytes.
func loadString(p unsafe.Pointer) (string, bool) {
	if p == nil {
		return "", false
	}
	var b []byte
	for i := 0; i < maxCString; i++ {
		c := *(*byte)(unsafe.Add(p, i))
		if c == 0 {
			return string(b), true
		}
		b = append(b, c)
	}
	return "", false
}

// storeHandles writes handles into the caller's array of *count entries
// and sets *count to len(handles): ERROR_INSUFFICIENT_SIZE when it is too
// small.
func storeHandles(array, count unsafe.Pointer, handles []uintptr) nvml.Return {
	if count == nil {
		return nvml.ERROR_INVALID_ARGUMENT
	}
	n := (*uint32)(count)
	capacity := *n
	*n = uint32(len(handles))
	if uint32(len(handles)) > capacity {
		return nvml.ERROR_INSUFFICIENT_SIZE
	}
	if len(handles) == 0 {
		return nvml.SUCCESS
	}
	if array == nil {
		return nvml.ERROR_INVALID_ARGUMENT
	}
	copy(unsafe.Slice((*uintptr)(array), len(handles)), handles)
	return nvml.SUCCESS
}

// toCChars copies s, NUL-terminated and truncated to fit, into a C char array.
func toCChars(dst []int8, s string) {
	if len(dst) == 0 {
		return
	}
	n := min(len(s), len(dst)-1)
	for i := 0; i < n; i++ {
		dst[i] = int8(s[i])
	}
	dst[n] = 0
}

func addrOf(b []byte) uintptr { return uintptr(unsafe.Pointer(unsafe.SliceData(b))) }

func boolToUint32(b bool) uint32 {
	if b {
		return 1
	}
	return 0
}
