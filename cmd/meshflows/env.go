package main

import (
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// Environment variables stand in for the flags users repeat: a flag given on the command line
// wins, the variable fills in for one that is not. bindEnv marks a flag with its variable and
// says so in its help; applyEnv, run before every command, fills the unset ones in.
const envAnnotation = "meshflows_env"

// bindEnv ties flag name of fs to the environment variable env.
func bindEnv(fs *pflag.FlagSet, name, env string) {
	f := fs.Lookup(name)
	if f == nil {
		panic("bindEnv: no flag " + name)
	}
	f.Usage += " (env " + env + ")"
	if err := fs.SetAnnotation(name, envAnnotation, []string{env}); err != nil {
		panic(err)
	}
}

// applyEnv sets every unset flag of cmd that has a variable from it.
func applyEnv(cmd *cobra.Command) error {
	var errs []string
	cmd.Flags().VisitAll(func(f *pflag.Flag) {
		env := f.Annotations[envAnnotation]
		if f.Changed || len(env) == 0 {
			return
		}
		v, ok := os.LookupEnv(env[0])
		if !ok || v == "" {
			return
		}
		if err := cmd.Flags().Set(f.Name, v); err != nil {
			errs = append(errs, fmt.Sprintf("%s=%q (for --%s): %v", env[0], v, f.Name, err))
		}
	})
	if len(errs) > 0 {
		return &exitError{code: 2, err: fmt.Errorf("environment: %s", strings.Join(errs, "; "))}
	}
	return nil
}

// bindLogEnv ties the log flags to MESHFLOWS_LOG_LEVEL and MESHFLOWS_LOG_FORMAT.
func bindLogEnv(fs *pflag.FlagSet) {
	if fs.Lookup("log-level") != nil {
		bindEnv(fs, "log-level", "MESHFLOWS_LOG_LEVEL")
	}
	if fs.Lookup("log-format") != nil {
		bindEnv(fs, "log-format", "MESHFLOWS_LOG_FORMAT")
	}
}
