package main

import (
	"flag"
	"fmt"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"github.com/spf13/viper"
	"k8s.io/klog/v2"
)

// newRootCommand builds the CLI. Every flag can also come from the
// environment as FLEETLET_<FLAG> (dashes as underscores) or from a config
// file given with --config; flags win over the environment, which wins over
// the file, as viper orders them.
func newRootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:           "fleetlet",
		Short:         "Emulate thousands of Kubernetes nodes against a real control plane and measure it",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.PersistentFlags().String("config", "", "config file (YAML) holding flag values")
	root.PersistentFlags().Int("v", 0, "log verbosity (klog)")
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		return fmt.Errorf("%w (see '%s --help')", err, c.CommandPath())
	})
	root.AddCommand(
		newRunCommand(),
		newFleetCommand(),
		newControlPlaneCommand(),
		newFakeRuntimeCommand(),
		newReportCommand(),
		newBenchCommand(),
		newAgentCommand(),
	)
	return root
}

// settings binds a command's flags to a fresh viper instance, so that each
// run reads its own configuration and nothing is shared between commands.
func settings(cmd *cobra.Command) (*viper.Viper, error) {
	v := viper.New()
	v.SetEnvPrefix("FLEETLET")
	v.SetEnvKeyReplacer(strings.NewReplacer("-", "_"))
	v.AutomaticEnv()
	if err := v.BindPFlags(cmd.Flags()); err != nil {
		return nil, err
	}
	if path, _ := cmd.Flags().GetString("config"); path != "" {
		v.SetConfigFile(path)
		if err := v.ReadInConfig(); err != nil {
			return nil, fmt.Errorf("reading config file %s: %w", path, err)
		}
	}
	setVerbosity(v.GetInt("v"))
	return v, nil
}

// setVerbosity hands --v to klog, whose flags live on the standard library's
// flag set.
func setVerbosity(level int) {
	fs := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(fs)
	_ = fs.Set("v", fmt.Sprint(level))
}

// flagsOf lists a command's flags for binding; it exists so commands can
// share flag groups.
func addFlags(cmd *cobra.Command, groups ...func(*pflag.FlagSet)) {
	for _, g := range groups {
		g(cmd.Flags())
	}
}
