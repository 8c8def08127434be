package plugin

import (
	"context"
	"encoding/json"
	"fmt"
	"io"

	resourceapi "k8s.io/api/resource/v1"
	"sigs.k8s.io/yaml"

	"github.com/gpudra/gpudra/internal/plugin/model"
	"github.com/gpudra/gpudra/internal/plugin/slice"
)

// Inspection is what `gpu-kubelet-plugin inspect` prints.
type Inspection struct {
	Node           *model.Node                 `json:"node"`
	ResourceSlices []resourceapi.ResourceSlice `json:"resourceSlices"`
}

// Inspect discovers the node's GPUs and builds the ResourceSlices the plugin
// would publish, without talking to a cluster.
func Inspect(ctx context.Context, o *Options) (*Inspection, error) {
	if o.NodeName == "" {
		o.NodeName = "localhost"
	}
	if err := o.resolveNames(); err != nil {
		return nil, err
	}
	gpus, err := OpenNode(ctx, o)
	if err != nil {
		return nil, err
	}
	defer gpus.Close()
	res, err := slice.Resources(o.NodeName, gpus.Node, o.sliceOptions())
	if err != nil {
		return nil, err
	}
	return &Inspection{Node: gpus.Node, ResourceSlices: slice.Objects(o.DriverName, o.NodeName, res)}, nil
}

// Print writes the inspection as "json" or "yaml".
func (i *Inspection) Print(w io.Writer, format string) error {
	var out []byte
	var err error
	switch format {
	case "json":
		out, err = json.MarshalIndent(i, "", "  ")
		out = append(out, '\n')
	case "yaml", "":
		out, err = yaml.Marshal(i)
	default:
		return fmt.Errorf("unknown output format %q: use json or yaml", format)
	}
	if err != nil {
		return err
	}
	_, err = w.Write(out)
	return err
}
