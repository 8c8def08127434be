package deviceclass

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/utils/ptr"

	"github.com/gpudra/gpudra/internal/shared/compat"
)

// Names of the native base classes; compat.Names.GPUClass and MIGClass name
// them for any mode.
const (
	GPUClassName = "gpu.gpudra.io"
	MIGClassName = "mig.gpudra.io"
)

// Labels and annotations on the classes the controller writes.
const (
	ManagedByLabel = "app.kubernetes.io/managed-by"
	ManagedByValue = "gpudra-controller"
	// ModelLabel marks per-model classes; only classes with it are ever
	// deleted.
	ModelLabel = "gpudra.io/managed"
	// ProductNameAnnotation holds the productName a per-model class selects.
	ProductNameAnnotation = "gpudra.io/product-name"
	// MIGProfileAnnotation holds the MIG profile a per-profile class
	// selects; such a class carries ModelLabel too.
	MIGProfileAnnotation = "gpudra.io/mig-profile"
)

// modelSuffix ends the name of every per-model class of the driver n,
// profileSuffix that of every per-profile MIG class.
func modelSuffix(n compat.Names) string   { return "." + n.GPUClass }
func profileSuffix(n compat.Names) string { return "." + n.MIGClass }

// BaseSelector is the CEL expression that selects devices of the native
// driver with the given type attribute ("gpu" or "mig").
func BaseSelector(deviceType string) string { return SelectorFor(compat.Default(), deviceType) }

// SelectorFor is BaseSelector for the driver n.
func SelectorFor(n compat.Names, deviceType string) string {
	return fmt.Sprintf(`device.driver == %s && device.attributes[%s].type == %s`,
		celString(n.Driver), celString(n.Driver), celString(deviceType))
}

// ModelSelector is BaseSelector("gpu") restricted to one productName.
func ModelSelector(productName string) string { return modelSelectorFor(compat.Default(), productName) }

func modelSelectorFor(n compat.Names, productName string) string {
	return fmt.Sprintf(`%s && device.attributes[%s].productName == %s`,
		SelectorFor(n, "gpu"), celString(n.Driver), celString(productName))
}

// celString quotes s as a CEL string literal. Go's quoting only produces
// escapes CEL shares (\" \\ \n \t \xNN \uNNNN \UNNNNNNNN and friends), so
// any productName, quotes and backslashes included, round-trips.
func celString(s string) string { return strconv.Quote(s) }

// BaseClasses returns the classes the controller always keeps: gpu.gpudra.io
// (with spec.extendedResourceName set when extendedResourceName is not empty)
// and mig.gpudra.io.
func BaseClasses(extendedResourceName string) []*resourceapi.DeviceClass {
	return BaseClassesFor(compat.Default(), extendedResourceName)
}

// BaseClassesFor is BaseClasses for the driver n: gpu.nvidia.com and
// mig.nvidia.com in the NVIDIA compatibility mode, and with passthrough
// (n.VFIOClass) the class of vfio devices, vfio.gpu.gpudra.io or NVIDIA's
// vfio.gpu.nvidia.com, which never carries the extended resource name: a
// pod asking for nvidia.com/gpu wants a GPU for its containers.
func BaseClassesFor(n compat.Names, extendedResourceName string) []*resourceapi.DeviceClass {
	gpu := newClass(n.GPUClass, SelectorFor(n, "gpu"))
	if extendedResourceName != "" {
		gpu.Spec.ExtendedResourceName = ptr.To(extendedResourceName)
	}
	out := []*resourceapi.DeviceClass{gpu, newClass(n.MIGClass, SelectorFor(n, "mig"))}
	if n.VFIOClass != "" {
		out = append(out, newClass(n.VFIOClass, SelectorFor(n, "vfio")))
	}
	return out
}

// ModelClass returns the per-model class for productName.
func ModelClass(productName string) (*resourceapi.DeviceClass, error) {
	return modelClassFor(compat.Default(), productName)
}

func modelClassFor(n compat.Names, productName string) (*resourceapi.DeviceClass, error) {
	name, err := classNameForProduct(n, productName)
	if err != nil {
		return nil, err
	}
	c := newClass(name, modelSelectorFor(n, productName))
	c.Labels[ModelLabel] = "true"
	c.Annotations = map[string]string{ProductNameAnnotation: productName}
	return c, nil
}

// MIGProfileSelector is BaseSelector("mig") restricted to one MIG profile.
func MIGProfileSelector(profile string) string {
	return migProfileSelectorFor(compat.Default(), profile)
}

func migProfileSelectorFor(n compat.Names, profile string) string {
	return fmt.Sprintf(`%s && device.attributes[%s].profile == %s`,
		SelectorFor(n, "mig"), celString(n.Driver), celString(profile))
}

// MIGProfileClass returns the per-profile class for a MIG profile such as
// "1g.10gb", with spec.extendedResourceName set to extendedResourcePrefix
// followed by the profile (nvidia.com/mig- gives nvidia.com/mig-1g.10gb, the
// device plugin's name) unless the prefix is empty.
func MIGProfileClass(profile, extendedResourcePrefix string) (*resourceapi.DeviceClass, error) {
	return migProfileClassFor(compat.Default(), profile, extendedResourcePrefix)
}

func migProfileClassFor(n compat.Names, profile, extendedResourcePrefix string) (*resourceapi.DeviceClass, error) {
	name, err := classNameForMIGProfile(n, profile)
	if err != nil {
		return nil, err
	}
	c := newClass(name, migProfileSelectorFor(n, profile))
	c.Labels[ModelLabel] = "true"
	c.Annotations = map[string]string{MIGProfileAnnotation: profile}
	if extendedResourcePrefix != "" {
		ern := extendedResourcePrefix + profileToken(profile)
		if errs := validation.IsQualifiedName(ern); len(errs) > 0 || !strings.Contains(ern, "/") {
			return nil, fmt.Errorf("extended resource name %q for MIG profile %q is not a qualified name <domain>/<name> (%s); "+
				"fix --mig-extended-resource-prefix", ern, profile, strings.Join(errs, "; "))
		}
		c.Spec.ExtendedResourceName = ptr.To(ern)
	}
	return c, nil
}

// profileToken writes a MIG profile the way NVIDIA's device plugin names its
// resources: lower case, "+" (1g.10gb+me) turned into ".".
func profileToken(profile string) string {
	return strings.ReplaceAll(strings.ToLower(strings.TrimSpace(profile)), "+", ".")
}

// ClassNameForMIGProfile derives the per-profile class name from a MIG
// profile: "1g.10gb" becomes "1g.10gb.mig.gpudra.io", "1g.10gb+me"
// "1g.10gb.me.mig.gpudra.io".
func ClassNameForMIGProfile(profile string) (string, error) {
	return classNameForMIGProfile(compat.Default(), profile)
}

// classNameForMIGProfile is ClassNameForMIGProfile for the driver n (suffix
// .<n.MIGClass>).
func classNameForMIGProfile(n compat.Names, profile string) (string, error) {
	name := profileToken(profile) + profileSuffix(n)
	if errs := validation.IsDNS1123Subdomain(name); len(errs) > 0 || profileToken(profile) == "" {
		return "", fmt.Errorf("DeviceClass name %q derived from MIG profile %q is invalid: %s", name, profile, strings.Join(errs, "; "))
	}
	return name, nil
}

// isProfileClassName reports whether name has the form of a per-profile
// MIG class of the driver n.
func isProfileClassName(n compat.Names, name string) bool {
	return strings.HasSuffix(name, profileSuffix(n)) && name != n.MIGClass
}

func newClass(name, selector string) *resourceapi.DeviceClass {
	return &resourceapi.DeviceClass{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{ManagedByLabel: ManagedByValue}},
		Spec: resourceapi.DeviceClassSpec{
			Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{Expression: selector}}},
		},
	}
}

// ClassNameForProduct derives the per-model class name from a productName:
// lower case, without a leading "NVIDIA ", every run of characters other than
// a-z and 0-9 turned into one "-", trimmed, followed by ".gpu.gpudra.io".
// "NVIDIA H100 80GB HBM3" becomes "h100-80gb-hbm3.gpu.gpudra.io". A first
// label longer than 63 characters is shortened and made unique with a hash
// of the productName.
func ClassNameForProduct(productName string) (string, error) {
	return classNameForProduct(compat.Default(), productName)
}

// classNameForProduct is ClassNameForProduct for the driver n (suffix
// .<n.GPUClass>).
func classNameForProduct(n compat.Names, productName string) (string, error) {
	s := strings.ToLower(strings.TrimSpace(productName))
	s = strings.TrimPrefix(s, "nvidia ")
	var b strings.Builder
	dash := false
	for _, r := range s {
		if (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9') {
			if dash && b.Len() > 0 {
				b.WriteByte('-')
			}
			b.WriteRune(r)
			dash = false
			continue
		}
		dash = true
	}
	label := b.String()
	if label == "" {
		return "", fmt.Errorf("productName %q has no letters or digits to name a DeviceClass after", productName)
	}
	if len(label) > validation.DNS1123LabelMaxLength {
		sum := sha256.Sum256([]byte(productName))
		label = strings.TrimRight(label[:validation.DNS1123LabelMaxLength-9], "-") + "-" + hex.EncodeToString(sum[:4])
	}
	name := label + modelSuffix(n)
	if errs := validation.IsDNS1123Subdomain(name); len(errs) > 0 {
		return "", fmt.Errorf("DeviceClass name %q derived from productName %q is invalid: %s", name, productName, strings.Join(errs, "; "))
	}
	return name, nil
}

// isModelClassName reports whether name has the form of a per-model class
// of the driver n.
func isModelClassName(n compat.Names, name string) bool {
	return strings.HasSuffix(name, modelSuffix(n)) && name != n.GPUClass
}

// isManaged reports whether the controller owns c.
func isManaged(c *resourceapi.DeviceClass) bool {
	return c.Labels[ManagedByLabel] == ManagedByValue || c.Labels[ModelLabel] == "true"
}

// needsUpdate reports whether existing differs from desired in spec, labels
// or annotations. ignoreExtendedResource skips spec.extendedResourceName when
// the API server is known to drop it (DRAExtendedResource feature disabled).
func needsUpdate(existing, desired *resourceapi.DeviceClass, ignoreExtendedResource bool) bool {
	want := desired.Spec
	if ignoreExtendedResource {
		want.ExtendedResourceName = existing.Spec.ExtendedResourceName
	}
	if !apiequality.Semantic.DeepEqual(existing.Spec, want) {
		return true
	}
	for k, v := range desired.Labels {
		if existing.Labels[k] != v {
			return true
		}
	}
	for k, v := range desired.Annotations {
		if existing.Annotations[k] != v {
			return true
		}
	}
	return false
}

// merged returns existing with desired's spec, labels and annotations.
func merged(existing, desired *resourceapi.DeviceClass) *resourceapi.DeviceClass {
	out := existing.DeepCopy()
	out.Spec = *desired.Spec.DeepCopy()
	if out.Labels == nil {
		out.Labels = map[string]string{}
	}
	for k, v := range desired.Labels {
		out.Labels[k] = v
	}
	if len(desired.Annotations) > 0 && out.Annotations == nil {
		out.Annotations = map[string]string{}
	}
	for k, v := range desired.Annotations {
		out.Annotations[k] = v
	}
	return out
}
