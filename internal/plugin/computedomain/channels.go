package computedomain

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
	"k8s.io/klog/v2"
	cdispec "tags.cncf.io/container-device-interface/specs-go"

	"github.com/gpudra/gpudra/internal/plugin/nvmllib"
)

// ChannelsDevice is the kernel driver's character device of IMEX channels
// in /proc/devices; its major number is dynamic (242 on an H200 host we
// read, fakedriver.IMEXChannelsMajor in fake roots).
const ChannelsDevice = "nvidia-caps-imex-channels"

// ChannelDir is where channel device nodes live, in the container as on
// the host (relative to the device root): channel<N> has minor N.
const ChannelDir = "/dev/nvidia-caps-imex-channels"

// channelMode is the mode of the device nodes we create, the one NVIDIA's
// DRA driver gives them: who may use a channel is decided by which
// containers get the node (the claims), not by the file's mode.
const channelMode = 0o666

// ChannelPath is channel id's device node in the container.
func ChannelPath(id int) string { return path.Join(ChannelDir, "channel"+strconv.Itoa(id)) }

// ReadChannelsMajor reads the major number of IMEX channels from the
// "Character devices" section of procDir/devices.
func ReadChannelsMajor(procDir string) (int, error) {
	major, err := readCharMajor(procDir, ChannelsDevice)
	if errors.Is(err, errNoDevice) {
		return 0, fmt.Errorf("%w: the loaded NVIDIA kernel driver offers no IMEX channels; ComputeDomains need a driver "+
			"with IMEX support (and, in a container, the driver root's or the host's /proc)", err)
	}
	return major, err
}

// errNoDevice: proc/devices does not list the character device.
var errNoDevice = errors.New("no such character device")

// readCharMajor reads the major of a character device from the
// "Character devices" section of procDir/devices.
func readCharMajor(procDir, device string) (int, error) {
	file := filepath.Join(procDir, "devices")
	data, err := os.ReadFile(file)
	if err != nil {
		return 0, fmt.Errorf("read the driver's device numbers: %w", err)
	}
	sc := bufio.NewScanner(bytes.NewReader(data))
	char := false
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "":
			continue
		case strings.HasSuffix(line, ":"):
			char = line == "Character devices:"
			continue
		}
		fields := strings.Fields(line)
		if !char || len(fields) != 2 || fields[1] != device {
			continue
		}
		major, err := strconv.Atoi(fields[0])
		if err != nil || major <= 0 {
			return 0, fmt.Errorf("%s: %q is not a major number of %s", file, fields[0], device)
		}
		return major, nil
	}
	if err := sc.Err(); err != nil {
		return 0, fmt.Errorf("read %s: %w", file, err)
	}
	return 0, fmt.Errorf("%s lists %w %s", file, errNoDevice, device)
}

// Channels creates IMEX channel device nodes under a device root and
// names them in CDI edits.
type Channels struct {
	// Dev and HostDev are the directories under which dev/ lies, as this
	// process and as the host (the container runtime) see it.
	Dev, HostDev string
	// Major is the channels' major number (ReadChannelsMajor).
	Major int
}

// NewChannels reads the channels' major number where roots say the
// driver's /proc is, and creates nodes under roots' device root.
func NewChannels(roots nvmllib.Roots) (*Channels, error) {
	major, err := ReadChannelsMajor(roots.Proc)
	if err != nil {
		return nil, err
	}
	return &Channels{Dev: roots.Dev, HostDev: roots.HostDev, Major: major}, nil
}

// Edits makes sure the device nodes of the channels ids exist (creating the
// missing ones with mknod, as the kernel driver creates none on its own)
// and returns the CDI edits that put them into a container. It is
// idempotent and safe to call concurrently; an existing node with another
// device number or of another kind is an error, never replaced.
func (c *Channels) Edits(ctx context.Context, ids []int) (*cdispec.ContainerEdits, error) {
	if len(ids) == 0 {
		return &cdispec.ContainerEdits{}, nil
	}
	dir := filepath.Join(c.Dev, ChannelDir)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("create the directory of IMEX channel device nodes: %w", err)
	}
	edits := &cdispec.ContainerEdits{DeviceNodes: make([]*cdispec.DeviceNode, 0, len(ids))}
	created := 0
	for _, id := range ids {
		made, err := c.ensure(id)
		if err != nil {
			return nil, err
		}
		if made {
			created++
		}
		mode := os.FileMode(channelMode)
		node := &cdispec.DeviceNode{Path: ChannelPath(id), Type: "c", Major: int64(c.Major), Minor: int64(id), FileMode: &mode}
		if c.HostDev != "" && c.HostDev != "/" {
			node.HostPath = filepath.Join(c.HostDev, ChannelPath(id))
		}
		edits.DeviceNodes = append(edits.DeviceNodes, node)
	}
	if created > 0 {
		klog.FromContext(ctx).V(4).Info("Created IMEX channel device nodes", "dir", dir, "count", created)
	}
	return edits, nil
}

// ensure creates channel id's node unless it exists with the right number.
func (c *Channels) ensure(id int) (created bool, err error) {
	if id < 0 || id >= MaxChannels {
		return false, fmt.Errorf("IMEX channel %d: channel numbers are between 0 and %d", id, MaxChannels-1)
	}
	p := filepath.Join(c.Dev, ChannelPath(id))
	dev := int(unix.Mkdev(uint32(c.Major), uint32(id)))
	err = syscall.Mknod(p, syscall.S_IFCHR|channelMode, dev)
	switch {
	case err == nil:
		// mknod's mode is cut by the umask.
		if err := os.Chmod(p, channelMode); err != nil {
			return true, fmt.Errorf("set the mode of IMEX channel device node %s: %w", p, err)
		}
		return true, nil
	case errors.Is(err, fs.ErrExist):
		return false, c.check(p, id)
	case errors.Is(err, syscall.EPERM):
		return false, fmt.Errorf("create IMEX channel device node %s: %w: the plugin needs CAP_MKNOD (run it privileged), "+
			"or create the node beforehand (mknod %s c %d %d)", p, err, p, c.Major, id)
	default:
		return false, fmt.Errorf("create IMEX channel device node %s: %w", p, err)
	}
}

// check verifies an existing node: a character device of channel id.
func (c *Channels) check(p string, id int) error {
	var st unix.Stat_t
	if err := unix.Stat(p, &st); err != nil {
		return fmt.Errorf("check IMEX channel device node %s: %w", p, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFCHR {
		return fmt.Errorf("%s exists but is not a character device: remove it, so that the IMEX channel's device node can be created", p)
	}
	major, minor := int(unix.Major(st.Rdev)), int(unix.Minor(st.Rdev))
	if major != c.Major || minor != id {
		return fmt.Errorf("%s is device %d:%d, but IMEX channel %d is %d:%d (%s in /proc/devices): remove the stale node, "+
			"so that it can be created again", p, major, minor, id, c.Major, id, ChannelsDevice)
	}
	return nil
}

// AllChannels returns 0 .. n-1.
func AllChannels(n int) []int {
	ids := make([]int, n)
	for i := range ids {
		ids[i] = i
	}
	return ids
}
