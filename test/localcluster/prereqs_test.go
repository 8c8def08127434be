package localcluster

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestParsePrereqs(t *testing.T) {
	for _, tc := range []struct {
		name, text, group string
		want              []hostPrereq
		wantErr           string
	}{
		{name: "comments and blank lines", group: "cluster", text: "# group check package why\n\n  # indented\n",
			want: nil},
		{name: "one group of several", group: "cluster",
			text: "build gcc gcc cgo\ncluster /usr/sbin/runc runc the nodes' runtime\ncluster ip iproute2 links\n",
			want: []hostPrereq{{"cluster", "/usr/sbin/runc", "runc"}, {"cluster", "ip", "iproute2"}}},
		{name: "a line without its package", group: "cluster", text: "cluster curl\n",
			wantErr: `:1: want "group check package why", got "cluster curl"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parsePrereqs(strings.NewReader(tc.text), tc.group)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || !slices.Equal(got, tc.want) {
				t.Fatalf("got %v, %v; want %v", got, err, tc.want)
			}
		})
	}
}

func TestMissingPrereqs(t *testing.T) {
	prereqs := []hostPrereq{{"cluster", "/usr/sbin/runc", "runc"}, {"cluster", "/usr/lib/cni/bridge", "containernetworking-plugins"},
		{"cluster", "iptables", "iptables"}, {"cluster", "ip", "iproute2"}}
	for _, tc := range []struct {
		name        string
		files, cmds []string
		wantMissing []string
	}{
		{name: "all there", files: []string{"/usr/sbin/runc", "/usr/lib/cni/bridge"}, cmds: []string{"iptables", "ip"}},
		{name: "fresh machine", cmds: []string{"ip"},
			wantMissing: []string{"runc (/usr/sbin/runc)", "containernetworking-plugins (/usr/lib/cni/bridge)", "iptables (iptables)"}},
		{name: "a path is not a command", files: []string{"/usr/sbin/runc", "/usr/lib/cni/bridge", "iptables", "ip"}, cmds: []string{"/usr/sbin/runc"},
			wantMissing: []string{"iptables (iptables)", "iproute2 (ip)"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := missingPrereqs(prereqs, func(p string) bool { return slices.Contains(tc.files, p) },
				func(c string) bool { return slices.Contains(tc.cmds, c) })
			if !slices.Equal(got, tc.wantMissing) {
				t.Errorf("missing = %q, want %q", got, tc.wantMissing)
			}
		})
	}
}

// The repository's list parses, and its cluster group covers every host
// tool the cluster runs (run(...) in this package) and what its default
// config names.
func TestPrereqsListCoversCluster(t *testing.T) {
	f, err := os.Open(filepath.Join("..", "..", PrereqsList))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	prereqs, err := parsePrereqs(f, "cluster")
	if err != nil {
		t.Fatal(err)
	}
	var checks []string
	for _, p := range prereqs {
		checks = append(checks, p.Check)
	}
	cfg := DefaultConfig("/repo")
	for _, want := range []string{"nsenter", "unshare", "mount", "umount", "ip", "iptables", cfg.Runc,
		filepath.Join(cfg.CNIBinDir, "bridge"), filepath.Join(cfg.CNIBinDir, "host-local"), filepath.Join(cfg.CNIBinDir, "portmap")} {
		if !slices.Contains(checks, want) {
			t.Errorf("%s's cluster group does not check %s", PrereqsList, want)
		}
	}
}
