package nvmlsim

import (
	"testing"

	"github.com/gpudra/gpudra/test/cshared"
)

// The Makefile's sim-nvml-lib builds the library with Build's flags.
func TestMakefileBuildsLikeBuild(t *testing.T) {
	cshared.CheckMakefile(t, "./test/nvmlsim/lib", LDFlags)
}

// The built library has the real one's SONAME: ldconfig indexes it by it.
func TestBuildSONAME(t *testing.T) {
	cshared.CheckSONAME(t, Build, SONAME)
}
