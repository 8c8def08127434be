package localcluster

import (
	"io"
	"os"
	"testing"
)

// A Cluster held by one process (the e2e suite) sees the nodes another
// process (the gpudra-cluster CLI of a notebook) added or removed: its next
// node gets a free slot, so its own kubelet ports, and its helm values keep
// the other node's group.
func TestClusterSeesNodesAnotherProcessRecorded(t *testing.T) {
	cfg := DefaultConfig(t.TempDir())
	cfg.Dir = t.TempDir()
	if err := os.MkdirAll(cfg.Dir, 0o755); err != nil {
		t.Fatal(err)
	}
	held := New(cfg, io.Discard)
	if err := held.cfg.save(); err != nil {
		t.Fatal(err)
	}
	if got := held.freeSlot(); got != 2 {
		t.Fatalf("free slot of the default cluster = %d, want 2", got)
	}

	cli, err := Open(cfg.Dir, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	cli.cfg.Nodes = append(cli.cfg.Nodes, NodeSpec{Name: "gpu-share", Profile: "h100x1", Slot: cli.freeSlot()})
	cli.cfg.NodeGroups = append(cli.cfg.NodeGroups, NodeGroup{Name: "gpu-share"})
	if err := cli.cfg.save(); err != nil {
		t.Fatal(err)
	}

	if err := held.refresh(); err != nil {
		t.Fatal(err)
	}
	if got := held.freeSlot(); got != 3 {
		t.Errorf("after another process added a node in slot 2, free slot = %d, want 3", got)
	}
	if got := held.Config().NodeGroups; len(got) != 1 || got[0].Name != "gpu-share" {
		t.Errorf("node groups = %+v, want the other process's gpu-share", got)
	}

	// The other process removes it again: the slot is free once more.
	cli.cfg.Nodes = cli.cfg.Nodes[:2]
	cli.cfg.NodeGroups = nil
	if err := cli.cfg.save(); err != nil {
		t.Fatal(err)
	}
	if got := held.Config().Nodes; len(got) != 2 {
		t.Errorf("nodes after the removal = %+v, want the two default ones", got)
	}
	if got := held.freeSlot(); got != 2 {
		t.Errorf("free slot after the removal = %d, want 2", got)
	}
}

// Before Up records the cluster there is nothing to read: the configuration
// given stays.
func TestRefreshWithoutRecord(t *testing.T) {
	cfg := DefaultConfig(t.TempDir())
	cfg.Dir = t.TempDir() + "/not-yet"
	c := New(cfg, io.Discard)
	if err := c.refresh(); err != nil {
		t.Fatalf("refresh before any record: %v", err)
	}
	if len(c.Config().Nodes) != 2 {
		t.Errorf("nodes = %+v, want the configured two", c.Config().Nodes)
	}
}
