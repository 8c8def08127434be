package v1alpha1

import (
	"fmt"

	"k8s.io/apimachinery/pkg/util/validation/field"
)

// Validate checks the contents of p (not its apiVersion and kind, which
// Decode checks) and returns every problem found, with paths such as
// "sharing.strategy". It expects a defaulted object: an empty strategy is
// reported as missing. A nil p, like a nil sharing, means exclusive use and
// is valid.
func Validate(p *GpuClaimParameters) field.ErrorList {
	if p == nil || p.Sharing == nil {
		return nil
	}
	return validateSharing(p.Sharing, field.NewPath("sharing"))
}

func validateSharing(s *GpuSharing, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	strategyPath := path.Child("strategy")
	switch s.Strategy {
	case ExclusiveStrategy, TimeSlicingStrategy, MPSStrategy:
	case "":
		errs = append(errs, field.Required(strategyPath,
			fmt.Sprintf("supported values: %s", quoteAll(SupportedStrategies))))
	default:
		errs = append(errs, field.NotSupported(strategyPath, s.Strategy, SupportedStrategies))
	}

	if s.TimeSlicing != nil {
		tsPath := path.Child("timeSlicing")
		if s.Strategy == TimeSlicingStrategy {
			errs = append(errs, validateTimeSlicing(s.TimeSlicing, tsPath)...)
		} else {
			errs = append(errs, field.Invalid(tsPath, s.TimeSlicing,
				"timeSlicing may only be set when strategy is TimeSlicing"))
		}
	}
	if s.MPS != nil {
		mpsPath := path.Child("mps")
		if s.Strategy == MPSStrategy {
			errs = append(errs, validateMPS(s.MPS, mpsPath)...)
		} else {
			errs = append(errs, field.Invalid(mpsPath, "{...}", "mps may only be set when strategy is MPS"))
		}
	}
	return errs
}

func validateTimeSlicing(ts *TimeSlicingConfig, path *field.Path) field.ErrorList {
	if ts.Interval.Int() >= 0 {
		return nil
	}
	p := path.Child("interval")
	if ts.Interval == "" {
		return field.ErrorList{field.Required(p,
			fmt.Sprintf("supported values: %s", quoteAll(SupportedIntervals)))}
	}
	return field.ErrorList{field.NotSupported(p, ts.Interval, SupportedIntervals)}
}

// quoteAll renders values the way field.NotSupported does: "a", "b".
func quoteAll[T ~string](values []T) string {
	out := ""
	for i, v := range values {
		if i > 0 {
			out += ", "
		}
		out += fmt.Sprintf("%q", string(v))
	}
	return out
}
