// Package deviceclass is the gpu-controller's DeviceClass manager.
//
// It keeps two base classes, gpu.gpudra.io (whole GPUs, optionally with
// spec.extendedResourceName so that pods asking for e.g. nvidia.com/gpu are
// served through DRA) and mig.gpudra.io (MIG devices), recreating them when
// they are deleted and repairing them when their spec is edited.
//
// With per-model classes on, it also keeps one class per GPU model
// (productName) that a ResourceSlice of driver gpu.gpudra.io publishes, named
// after the model: "NVIDIA H100 80GB HBM3" gets h100-80gb-hbm3.gpu.gpudra.io,
// which selects whole GPUs of exactly that productName. Users can then ask for
// a model without writing CEL. A model class is deleted once no slice has a
// GPU of that model and no ResourceClaim references the class (a claim that
// still names it keeps it, so that a node that is only being replaced does
// not break pending claims); claim changes trigger a new check. Templates are
// not considered: a template naming a vanished model produces claims that
// cannot be allocated anyway.
//
// With per-profile MIG classes on, it likewise keeps one class per MIG
// profile that a slice of the driver has a MIG device of (an existing one,
// or a dynamic-MIG placement): 1g.10gb.mig.gpudra.io selects MIG devices of
// profile 1g.10gb. With a prefix such as nvidia.com/mig- the class also sets
// spec.extendedResourceName to nvidia.com/mig-1g.10gb, so a pod written for
// NVIDIA's device plugin (resources.limits: nvidia.com/mig-1g.10gb: 1) gets
// a DRA MIG device. They carry the same label as per-model classes and the
// profile in the gpudra.io/mig-profile annotation, and are deleted the same
// way.
//
// Per-model and per-profile classes are named after what plugins publish, so
// their number is bounded (Options.MaxDerivedClasses, cap.go).
//
// The controller owns the classes labelled app.kubernetes.io/managed-by=
// gpudra-controller (all it creates) or gpudra.io/managed=true (the per-model
// ones, which also carry the productName in the gpudra.io/product-name
// annotation); deployments/static carries the managed-by label, so a class
// applied from there is adopted. A class of the same name without those
// labels, for example one an administrator wrote, is never changed or
// deleted; the conflict is logged and reported as a Warning event on the
// class.
package deviceclass
