package computedomain

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"

	cdispec "tags.cncf.io/container-device-interface/specs-go"
)

// fabricMgmtCap is the kernel driver's capability file of IMEX fabric
// management under /proc: nvidia-imex opens the capability's device node,
// /dev/nvidia-caps/nvidia-cap<DeviceFileMinor>, of the nvidia-caps major.
const fabricMgmtCap = "driver/nvidia/capabilities/fabric-imex-mgmt"

// ReadFabricMgmt returns the CDI device node of the fabric-imex-mgmt
// capability that an IMEX daemon's container needs, from the driver's
// procDir (NVIDIA's driver gives the daemon the same node). hostDev is
// the host's directory above dev/ ("/" normally). An error wrapping
// fs.ErrNotExist means the driver offers no such capability (no IMEX).
func ReadFabricMgmt(procDir, hostDev string) (*cdispec.DeviceNode, error) {
	file := filepath.Join(procDir, fabricMgmtCap)
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("read the driver's IMEX fabric management capability: %w", err)
	}
	minor := -1
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), "DeviceFileMinor:"); ok {
			if minor, err = strconv.Atoi(strings.TrimSpace(v)); err != nil || minor < 0 {
				return nil, fmt.Errorf("%s: DeviceFileMinor %q is not a minor number", file, strings.TrimSpace(v))
			}
		}
	}
	if minor < 0 {
		return nil, fmt.Errorf("%s has no DeviceFileMinor line: cannot name the capability's device node", file)
	}
	major, err := readCharMajor(procDir, "nvidia-caps")
	if err != nil {
		return nil, fmt.Errorf("the major of the IMEX fabric management capability: %w", err)
	}
	mode := os.FileMode(0o666)
	p := path.Join("/dev/nvidia-caps", "nvidia-cap"+strconv.Itoa(minor))
	node := &cdispec.DeviceNode{Path: p, Type: "c", Major: int64(major), Minor: int64(minor), FileMode: &mode}
	if hostDev != "" && hostDev != "/" {
		node.HostPath = filepath.Join(hostDev, p)
	}
	return node, nil
}
