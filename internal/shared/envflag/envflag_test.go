package envflag

import (
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// flags are one flag of each type the programs bind or might.
type flags struct {
	name  string
	count int
	ratio float32
	on    bool
	every time.Duration
}

func newFlagSet(f *flags) *pflag.FlagSet {
	fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
	fs.StringVar(&f.name, "name", "default", "")
	fs.IntVar(&f.count, "count", 1, "")
	fs.Float32Var(&f.ratio, "ratio", 0.5, "")
	fs.BoolVar(&f.on, "on", false, "")
	fs.DurationVar(&f.every, "every", time.Second, "")
	return fs
}

var vars = []Var{{"name", "GPUDRA_NAME"}, {"count", "GPUDRA_COUNT"}, {"ratio", "GPUDRA_RATIO"},
	{"on", "GPUDRA_ON"}, {"every", "GPUDRA_EVERY"}}

func TestApply(t *testing.T) {
	defaults := flags{name: "default", count: 1, ratio: 0.5, every: time.Second}
	tests := []struct {
		name    string
		env     map[string]string
		args    []string
		vars    []Var
		want    flags
		wantErr string
	}{
		{name: "nothing set keeps the defaults", want: defaults},
		{name: "empty variables are unset", env: map[string]string{"GPUDRA_NAME": "", "GPUDRA_COUNT": ""}, want: defaults},
		{name: "variables set the flags",
			env:  map[string]string{"GPUDRA_NAME": "node-a", "GPUDRA_COUNT": "7", "GPUDRA_RATIO": "2.5", "GPUDRA_ON": "true", "GPUDRA_EVERY": "1m"},
			want: flags{name: "node-a", count: 7, ratio: 2.5, on: true, every: time.Minute}},
		{name: "the command line wins", env: map[string]string{"GPUDRA_NAME": "from-env", "GPUDRA_COUNT": "abc"},
			args: []string{"--name=from-flag", "--count=3"}, want: flags{name: "from-flag", count: 3, ratio: 0.5, every: time.Second}},
		{name: "malformed integer", env: map[string]string{"GPUDRA_COUNT": "abc"},
			wantErr: `$GPUDRA_COUNT="abc": not an integer (it sets --count; fix or unset the variable)`},
		{name: "malformed number", env: map[string]string{"GPUDRA_RATIO": "half"},
			wantErr: `$GPUDRA_RATIO="half": not a number (it sets --ratio`},
		{name: "malformed bool", env: map[string]string{"GPUDRA_ON": "yes please"},
			wantErr: `$GPUDRA_ON="yes please": not true or false (it sets --on`},
		{name: "malformed duration", env: map[string]string{"GPUDRA_EVERY": "10"},
			wantErr: `$GPUDRA_EVERY="10": not a duration such as 30s or 5m (it sets --every`},
		{name: "a binding to a missing flag", vars: []Var{{"nope", "GPUDRA_NOPE"}},
			wantErr: "$GPUDRA_NOPE is bound to --nope, which is not a flag of this command"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var got flags
			fs := newFlagSet(&got)
			if err := fs.Parse(tc.args); err != nil {
				t.Fatal(err)
			}
			lookup := func(name string) (string, bool) { v, ok := tc.env[name]; return v, ok }
			bound := vars
			if tc.vars != nil {
				bound = tc.vars
			}
			err := Apply(fs, lookup, bound...)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Apply: error %v, want it to contain %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("Apply: %v", err)
			}
			if got != tc.want {
				t.Fatalf("flags = %+v, want %+v", got, tc.want)
			}
		})
	}
}

// Bind applies the variables before the command runs, and keeps the
// command's own PreRunE.
func TestBind(t *testing.T) {
	tests := []struct {
		name    string
		env     map[string]string
		wantErr string
		want    int
	}{
		{name: "applied before RunE", env: map[string]string{"GPUDRA_COUNT": "5"}, want: 5},
		{name: "a malformed value stops the command", env: map[string]string{"GPUDRA_COUNT": "five"}, wantErr: `$GPUDRA_COUNT="five": not an integer`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var count, seen int
			preRan, ran := false, false
			cmd := &cobra.Command{Use: "test", RunE: func(*cobra.Command, []string) error { ran, seen = true, count; return nil }}
			cmd.PreRunE = func(*cobra.Command, []string) error { preRan = true; return nil }
			cmd.Flags().IntVar(&count, "count", 1, "")
			Bind(cmd, func(name string) (string, bool) { v, ok := tc.env[name]; return v, ok }, Var{"count", "GPUDRA_COUNT"})
			cmd.SetArgs(nil)
			err := cmd.Execute()
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Execute: error %v, want %q", err, tc.wantErr)
				}
				if ran || preRan {
					t.Fatal("the command ran despite the malformed variable")
				}
				return
			}
			if err != nil || !ran || !preRan || seen != tc.want {
				t.Fatalf("Execute: %v, ran %v, preRan %v, count %d; want count %d", err, ran, preRan, seen, tc.want)
			}
		})
	}
}
