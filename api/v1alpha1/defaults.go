package v1alpha1

// SetDefaults fills in the unset fields of p in place:
//   - no sharing, or sharing without a strategy, means Exclusive;
//   - the TimeSlicing strategy without settings, or with an empty interval,
//     gets the Default interval;
//   - the MPS strategy without settings gets an empty MpsConfig (MPS's own
//     defaults: all threads, no pinned-memory limit).
//
// It neither touches TypeMeta nor clears settings that do not fit the
// strategy; Validate reports those. A nil p is left alone.
func SetDefaults(p *GpuClaimParameters) {
	if p == nil {
		return
	}
	if p.Sharing == nil {
		p.Sharing = &GpuSharing{}
	}
	s := p.Sharing
	if s.Strategy == "" {
		s.Strategy = ExclusiveStrategy
	}
	if s.Strategy == TimeSlicingStrategy {
		if s.TimeSlicing == nil {
			s.TimeSlicing = &TimeSlicingConfig{}
		}
		if s.TimeSlicing.Interval == "" {
			s.TimeSlicing.Interval = DefaultTimeSlice
		}
	}
	if s.Strategy == MPSStrategy && s.MPS == nil {
		s.MPS = &MpsConfig{}
	}
}

// DefaultGpuClaimParameters returns a new, defaulted object with apiVersion
// and kind set: what applies to a device when no configuration names it.
func DefaultGpuClaimParameters() *GpuClaimParameters {
	p := &GpuClaimParameters{}
	p.APIVersion = APIVersion
	p.Kind = Kind
	SetDefaults(p)
	return p
}
