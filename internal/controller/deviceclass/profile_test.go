package deviceclass

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/dynamic-resource-allocation/cel"
	"k8s.io/utils/ptr"

	"github.com/gpudra/gpudra/internal/shared/compat"
)

func TestClassNameForMIGProfile(t *testing.T) {
	for _, tc := range []struct {
		profile, want, ern string
		wantErr            bool
	}{
		{profile: "1g.10gb", want: "1g.10gb.mig.gpudra.io", ern: "nvidia.com/mig-1g.10gb"},
		{profile: "3g.40gb", want: "3g.40gb.mig.gpudra.io", ern: "nvidia.com/mig-3g.40gb"},
		{profile: "1g.10gb+me", want: "1g.10gb.me.mig.gpudra.io", ern: "nvidia.com/mig-1g.10gb.me"},
		{profile: "1c.3g.40gb", want: "1c.3g.40gb.mig.gpudra.io", ern: "nvidia.com/mig-1c.3g.40gb"},
		{profile: "7g.141gb", want: "7g.141gb.mig.gpudra.io", ern: "nvidia.com/mig-7g.141gb"},
		{profile: "", wantErr: true},
		{profile: "1g 10gb", wantErr: true},
	} {
		t.Run(tc.profile, func(t *testing.T) {
			got, err := ClassNameForMIGProfile(tc.profile)
			if tc.wantErr {
				require.ErrorContains(t, err, "is invalid")
				_, err = MIGProfileClass(tc.profile, "nvidia.com/mig-")
				require.Error(t, err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
			assert.Empty(t, validation.IsDNS1123Subdomain(got))
			assert.True(t, isProfileClassName(compat.Default(), got))
			assert.False(t, isModelClassName(compat.Default(), got), "a profile class is never taken for a model class")

			c, err := MIGProfileClass(tc.profile, "nvidia.com/mig-")
			require.NoError(t, err)
			assert.Equal(t, tc.want, c.Name)
			assert.Equal(t, ptr.To(tc.ern), c.Spec.ExtendedResourceName)
			assert.Equal(t, tc.profile, c.Annotations[MIGProfileAnnotation])
			assert.Equal(t, "true", c.Labels[ModelLabel])
			c, err = MIGProfileClass(tc.profile, "")
			require.NoError(t, err)
			assert.Nil(t, c.Spec.ExtendedResourceName, "no prefix, no extended resource")
		})
	}
	assert.False(t, isProfileClassName(compat.Default(), MIGClassName))
	for _, prefix := range []string{"mig-", "nvidia.com/mig/", "Nvidia Com/mig-"} {
		_, err := MIGProfileClass("1g.10gb", prefix)
		assert.ErrorContains(t, err, "--mig-extended-resource-prefix", prefix)
	}
}

func TestMIGProfileSelector(t *testing.T) {
	mig := func(profile string) cel.Device {
		return device("gpu.gpudra.io", map[string]string{"type": "mig", "profile": profile})
	}
	gpu := device("gpu.gpudra.io", map[string]string{"type": "gpu", "profile": "1g.10gb"})
	compiler := cel.GetCompiler(cel.Features{})
	for _, tc := range []struct {
		name    string
		profile string
		device  cel.Device
		want    bool
	}{
		{"same profile", "1g.10gb", mig("1g.10gb"), true},
		{"other profile", "1g.10gb", mig("2g.20gb"), false},
		{"+me is another profile", "1g.10gb", mig("1g.10gb+me"), false},
		{"+me", "1g.10gb+me", mig("1g.10gb+me"), true},
		{"a whole GPU never", "1g.10gb", gpu, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := compiler.CompileCELExpression(MIGProfileSelector(tc.profile), cel.Options{})
			require.Nil(t, r.Error)
			got, _, err := r.DeviceMatches(t.Context(), tc.device)
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
		})
	}
}

// migSlice is a slice with one MIG device per profile.
func migSlice(name string, profiles ...string) *resourceapi.ResourceSlice {
	s := slice(name, "gpu.gpudra.io")
	for i, p := range profiles {
		s.Spec.Devices = append(s.Spec.Devices, resourceapi.Device{
			Name: fmt.Sprintf("gpu-0-mig-%d", i),
			Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
				"type": {StringValue: ptr.To("mig")}, "profile": {StringValue: ptr.To(p)},
				"productName": {StringValue: ptr.To("NVIDIA A100-SXM4-40GB")},
			},
		})
	}
	return s
}

func TestMIGProfileClassLifecycle(t *testing.T) {
	h := start(t, Options{PerProfileMIGClasses: true, MIGExtendedResourcePrefix: "nvidia.com/mig-"})
	slices := h.client.ResourceV1().ResourceSlices()
	_, err := slices.Create(t.Context(), migSlice("node-a", "1g.10gb", "1g.10gb", "3g.40gb"), metav1.CreateOptions{})
	require.NoError(t, err)
	small := h.waitClass("1g.10gb.mig.gpudra.io")
	assert.Equal(t, MIGProfileSelector("1g.10gb"), small.Spec.Selectors[0].CEL.Expression)
	assert.Equal(t, ptr.To("nvidia.com/mig-1g.10gb"), small.Spec.ExtendedResourceName)
	assert.Equal(t, ManagedByValue, small.Labels[ManagedByLabel])
	h.waitClass("3g.40gb.mig.gpudra.io")
	assert.Equal(t, 4, h.writes("create"), "two base classes and one class per profile, no model class (per-model off)")

	// A claim keeps a class whose profile is gone.
	_, err = h.client.ResourceV1().ResourceClaims("team-a").Create(t.Context(), claim("wants-3g", "3g.40gb.mig.gpudra.io"), metav1.CreateOptions{})
	require.NoError(t, err)
	_, err = slices.Update(t.Context(), migSlice("node-a", "1g.10gb"), metav1.UpdateOptions{})
	require.NoError(t, err)
	assert.Zero(t, h.writes("delete"))
	require.NoError(t, h.client.ResourceV1().ResourceClaims("team-a").Delete(t.Context(), "wants-3g", metav1.DeleteOptions{}))
	h.waitGone("3g.40gb.mig.gpudra.io")

	// Edited: repaired. The last MIG device goes: deleted.
	edited := h.waitClass("1g.10gb.mig.gpudra.io")
	edited.Spec.ExtendedResourceName = ptr.To("example.com/other")
	_, err = h.client.ResourceV1().DeviceClasses().Update(t.Context(), edited, metav1.UpdateOptions{})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		c, err := h.get("1g.10gb.mig.gpudra.io")
		return err == nil && *c.Spec.ExtendedResourceName == "nvidia.com/mig-1g.10gb"
	}, waitFor, tick)
	require.NoError(t, slices.Delete(t.Context(), "node-a", metav1.DeleteOptions{}))
	h.waitGone("1g.10gb.mig.gpudra.io")
}

// A claim the controller's cache has not seen yet (its watch event still on
// the way when the last MIG device of the profile leaves) still keeps the
// class: the controller asks the API server before a delete. Here the
// claims' watch never delivers, so only that live list knows the claim.
func TestClassKeptForAClaimTheCacheHasNotSeen(t *testing.T) {
	client := fake.NewClientset()
	client.PrependWatchReactor("resourceclaims", func(clienttesting.Action) (bool, watch.Interface, error) {
		return true, watch.NewFake(), nil
	})
	h := startWith(t, client, Options{PerProfileMIGClasses: true})
	slices := client.ResourceV1().ResourceSlices()
	_, err := slices.Create(t.Context(), migSlice("node-a", "1g.10gb", "3g.40gb"), metav1.CreateOptions{})
	require.NoError(t, err)
	h.waitClass("3g.40gb.mig.gpudra.io")
	_, err = client.ResourceV1().ResourceClaims("team-a").Create(t.Context(), claim("wants-3g", "3g.40gb.mig.gpudra.io"), metav1.CreateOptions{})
	require.NoError(t, err)

	_, err = slices.Update(t.Context(), migSlice("node-a", "1g.10gb"), metav1.UpdateOptions{})
	require.NoError(t, err)
	assert.Zero(t, h.writes("delete"), "a class deleted under a claim the cache had not seen")
	_, err = h.get("3g.40gb.mig.gpudra.io")
	require.NoError(t, err)
}

func TestModelAndProfileClassesAreIndependent(t *testing.T) {
	s := migSlice("node-a", "2g.20gb")
	s.Spec.Devices = append(s.Spec.Devices, slice("x", "gpu.gpudra.io", l4).Spec.Devices...)
	for _, tc := range []struct {
		name  string
		opts  Options
		want  []string
		never []string
	}{
		{"both", Options{PerModelClasses: true, PerProfileMIGClasses: true}, []string{l4Class, "2g.20gb.mig.gpudra.io"}, nil},
		{"models only", Options{PerModelClasses: true}, []string{l4Class}, []string{"2g.20gb.mig.gpudra.io"}},
		{"profiles only", Options{PerProfileMIGClasses: true}, []string{"2g.20gb.mig.gpudra.io"}, []string{l4Class}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			existing, err := ModelClass(h100)
			require.NoError(t, err)
			h := start(t, tc.opts, s.DeepCopy(), existing)
			for _, n := range tc.want {
				c := h.waitClass(n)
				assert.Nil(t, c.Spec.ExtendedResourceName, "no prefix given")
			}
			assert.Equal(t, 2+len(tc.want), h.writes("create"))
			for _, n := range tc.never {
				_, err := h.get(n)
				assert.Error(t, err, n)
			}
			if !tc.opts.PerModelClasses {
				assert.Zero(t, h.writes("delete"), "a stale model class is left alone with per-model classes off")
			}
		})
	}
}
