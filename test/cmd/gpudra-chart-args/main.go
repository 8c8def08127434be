// Command gpudra-chart-args reads `helm template` output of the gpudra chart
// on stdin and prints what the local cluster needs to run the kubelet plugin
// the way the chart's DaemonSet runs it: the plugin container's arguments, one
// per line, or with -mount-path VOLUME the container path a volume is
// mounted at. The local cluster takes its plugin flags from the chart this
// way, so the two cannot drift.
package main

import (
	"bufio"
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

func main() {
	mountPath := flag.String("mount-path", "", "print the container path of this volume's mount instead of the arguments")
	container := flag.String("container", "plugin", "container of the DaemonSet")
	flag.Parse()
	ctr, err := pluginContainer(os.Stdin, *container)
	if err != nil {
		fmt.Fprintf(os.Stderr, "gpudra-chart-args: %v\n", err)
		os.Exit(1)
	}
	if *mountPath != "" {
		for _, m := range ctr.VolumeMounts {
			if m.Name == *mountPath {
				fmt.Println(m.MountPath)
				return
			}
		}
		fmt.Fprintf(os.Stderr, "gpudra-chart-args: container %s mounts no volume %q\n", ctr.Name, *mountPath)
		os.Exit(1)
	}
	for _, a := range ctr.Args {
		fmt.Println(a)
	}
}

// pluginContainer finds the named container of the (single) DaemonSet in a
// multi-document YAML stream.
func pluginContainer(r io.Reader, name string) (*corev1.Container, error) {
	data, err := io.ReadAll(bufio.NewReader(r))
	if err != nil {
		return nil, err
	}
	for _, doc := range bytes.Split(data, []byte("\n---")) {
		var meta struct{ Kind string }
		if err := yaml.Unmarshal(doc, &meta); err != nil || meta.Kind != "DaemonSet" {
			continue
		}
		var ds appsv1.DaemonSet
		if err := yaml.Unmarshal(doc, &ds); err != nil {
			return nil, fmt.Errorf("decode the DaemonSet: %w", err)
		}
		for i := range ds.Spec.Template.Spec.Containers {
			if c := &ds.Spec.Template.Spec.Containers[i]; c.Name == name {
				return c, nil
			}
		}
		return nil, fmt.Errorf("DaemonSet %s has no container %q", ds.Name, name)
	}
	return nil, errors.New("no DaemonSet in the input: pipe `helm template ... --show-only templates/kubelet-plugin/daemonset.yaml` into it")
}
