// Package envflag lets a flag fall back to an environment variable, for the
// values a pod can only get through the downward API (its node's name, its
// own UID and namespace). Every other setting is a command-line flag.
//
// A variable that is set applies only where the command line did not set
// the flag, and goes through the flag's own parser: a value the flag would
// reject is an error that names the variable, never silently ignored.
package envflag

import (
	"fmt"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// Var binds a flag (its name without dashes) to an environment variable.
type Var struct {
	Flag, Env string
}

// Apply sets every bound flag that fs.Parse did not see from its variable,
// when the variable is set and not empty. lookup reads a variable
// (os.LookupEnv).
func Apply(fs *pflag.FlagSet, lookup func(string) (string, bool), vars ...Var) error {
	for _, v := range vars {
		f := fs.Lookup(v.Flag)
		if f == nil {
			return fmt.Errorf("$%s is bound to --%s, which is not a flag of this command", v.Env, v.Flag)
		}
		if f.Changed {
			continue
		}
		val, ok := lookup(v.Env)
		if !ok || val == "" {
			continue
		}
		if err := fs.Set(v.Flag, val); err != nil {
			return fmt.Errorf("$%s=%q: %s (it sets --%s; fix or unset the variable): %w", v.Env, val, expected(f), v.Flag, err)
		}
	}
	return nil
}

// Bind makes cmd apply vars (from lookup) to its flags after parsing them
// and before anything else of the command runs, keeping a PreRunE it has.
func Bind(cmd *cobra.Command, lookup func(string) (string, bool), vars ...Var) {
	pre := cmd.PreRunE
	cmd.PreRunE = func(c *cobra.Command, args []string) error {
		if err := Apply(c.Flags(), lookup, vars...); err != nil {
			return err
		}
		if pre != nil {
			return pre(c, args)
		}
		return nil
	}
}

// expected says in words what a flag of f's type accepts.
func expected(f *pflag.Flag) string {
	switch t := f.Value.Type(); t {
	case "int", "int8", "int16", "int32", "int64", "uint", "uint8", "uint16", "uint32", "uint64":
		return "not an integer"
	case "float32", "float64":
		return "not a number"
	case "bool":
		return "not true or false"
	case "duration":
		return "not a duration such as 30s or 5m"
	default:
		return "not a valid " + t
	}
}
