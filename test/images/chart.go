package images

import (
	"fmt"
	"os"
	"path/filepath"

	"sigs.k8s.io/yaml"
)

// DefaultChartDir is the chart, relative to the repository root.
const DefaultChartDir = "deployments/helm/gpudra"

// SimulatedValues is the values file the local cluster installs the chart
// with; its image tag names the gpudra image.
const SimulatedValues = "values-simulated.yaml"

type chartValues struct {
	Image struct {
		Repository string `json:"repository"`
		Tag        string `json:"tag"`
	} `json:"image"`
}

// GpudraImageName is the name the chart gives the gpudra image when it is
// installed with values-simulated.yaml: the repository of values.yaml, the
// tag of values-simulated.yaml (each overriding the other where it sets
// the field, as helm does), e.g. ghcr.io/gpudra/gpudra:dev.
func GpudraImageName(chartDir string) (string, error) {
	var merged chartValues
	for _, f := range []string{"values.yaml", SimulatedValues} {
		p := filepath.Join(chartDir, f)
		data, err := os.ReadFile(p)
		if err != nil {
			return "", fmt.Errorf("read the chart's values to name the gpudra image: %w", err)
		}
		var v chartValues
		if err := yaml.Unmarshal(data, &v); err != nil {
			return "", fmt.Errorf("%s: %w", p, err)
		}
		if v.Image.Repository != "" {
			merged.Image.Repository = v.Image.Repository
		}
		if v.Image.Tag != "" {
			merged.Image.Tag = v.Image.Tag
		}
	}
	if merged.Image.Repository == "" || merged.Image.Tag == "" {
		return "", fmt.Errorf("the chart %s sets no image.repository or no image.tag in values.yaml and %s (got %q:%q)",
			chartDir, SimulatedValues, merged.Image.Repository, merged.Image.Tag)
	}
	return merged.Image.Repository + ":" + merged.Image.Tag, nil
}
