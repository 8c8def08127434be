package fmsim

import (
	"testing"

	"github.com/gpudra/gpudra/test/cshared/cshtest"
)

// The Makefile's sim-fm-lib builds the library with Build's flags.
func TestMakefileBuildsLikeBuild(t *testing.T) {
	cshtest.CheckMakefile(t, "./test/fmsim/lib", LDFlags)
}

// The built library has the real one's SONAME: ldconfig indexes it by it.
func TestBuildSONAME(t *testing.T) {
	cshtest.CheckSONAME(t, Build, SONAME)
}

// The library links no test package: the plugin loads it.
func TestLibraryLinksNoTestPackages(t *testing.T) {
	cshtest.CheckDeps(t, LibPackage)
}
