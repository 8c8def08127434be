package localcluster

import "testing"

func TestNamesOfValues(t *testing.T) {
	for _, tc := range []struct {
		values []string
		driver string
		class  string
	}{
		{nil, "gpu.gpudra.io", "mig.gpudra.io"},
		{[]string{"kubeletPlugin.mig=dynamic"}, "gpu.gpudra.io", "mig.gpudra.io"},
		{[]string{"kubeletPlugin.mig=dynamic", "compatibility=nvidia"}, "gpu.nvidia.com", "mig.nvidia.com"},
		{[]string{"compatibility=nvidia", "compatibility="}, "gpu.gpudra.io", "mig.gpudra.io"},
	} {
		n := namesOfValues(tc.values)
		if n.Driver != tc.driver || n.MIGClass != tc.class {
			t.Errorf("%v: driver %s class %s, want %s %s", tc.values, n.Driver, n.MIGClass, tc.driver, tc.class)
		}
	}
}
