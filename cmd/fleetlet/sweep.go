package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/spf13/viper"

	"github.com/fleetlet/fleetlet/loadprofiles"
	"github.com/fleetlet/fleetlet/reports"
)

// sweepStep is one step's outcome, as sweep.json records it.
type sweepStep struct {
	Value  int      `json:"value"`
	Pass   bool     `json:"pass"`
	Failed []string `json:"failedSLOs,omitempty"`
	Error  string   `json:"error,omitempty"`
	Report string   `json:"report"`
	// PodStartupP99Ms is the pod_startup SLI's p99, the usual limit.
	PodStartupP99Ms float64 `json:"podStartupP99Ms"`
}

type sweepResult struct {
	Profile        string      `json:"profile"`
	Parameter      string      `json:"parameter"`
	Steps          []sweepStep `json:"steps"`
	LargestPassing *int        `json:"largestPassing"`
}

// parseSweep reads --sweep: "nodes=25,50,100" (the first node pool's count)
// or "qps=10,20,40" (every create and churn phase's rate).
func parseSweep(s string) (*loadprofiles.Sweep, error) {
	param, list, ok := strings.Cut(s, "=")
	bad := fmt.Errorf("--sweep %q: want nodes=N1,N2,... or qps=Q1,Q2,... in increasing order", s)
	if !ok || (param != "nodes" && param != "qps") {
		return nil, bad
	}
	sw := &loadprofiles.Sweep{Parameter: param}
	for _, f := range strings.Split(list, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n <= 0 || (len(sw.Values) > 0 && n <= sw.Values[len(sw.Values)-1]) {
			return nil, bad
		}
		sw.Values = append(sw.Values, n)
	}
	return sw, nil
}

// runSweep runs the profile once per step, each with a control plane and a
// fleet of its own so that no step inherits another's nodes or load, into
// out/<parameter>-<value>/, and writes sweep.json. It stops at the first
// step that fails; an interrupted or broken run is an error.
func runSweep(ctx context.Context, v *viper.Viper, sw *loadprofiles.Sweep, out string) error {
	res := sweepResult{Parameter: sw.Parameter}
	for _, value := range sw.Values {
		p, err := loadprofiles.Load(v.GetString("profile"))
		if err != nil {
			return err
		}
		res.Profile = p.Name
		sw.Apply(p, value)
		dir := filepath.Join(out, fmt.Sprintf("%s-%d", sw.Parameter, value))
		fmt.Fprintf(os.Stderr, "fleetlet: sweep step %s=%d\n", sw.Parameter, value)
		rep, runErr := runProfile(ctx, v, p, dir)
		step := sweepStep{Value: value, Report: filepath.Join(dir, "report.json")}
		if rep != nil {
			step.Pass = !rep.Failed() && runErr == nil
			for _, r := range rep.SLOs {
				if !r.Pass && !r.Skipped {
					step.Failed = append(step.Failed, r.Name+" "+r.Subject)
				}
			}
			for _, sli := range rep.SLIs {
				if sli.Name == reports.SLIPodStartup {
					step.PodStartupP99Ms = sli.P99Ms
				}
			}
		}
		if runErr != nil {
			step.Error = runErr.Error()
		}
		res.Steps = append(res.Steps, step)
		if step.Pass {
			res.LargestPassing = &value
		}
		if err := writeSweep(out, &res); err != nil {
			return err
		}
		if ctx.Err() != nil {
			return fmt.Errorf("sweep interrupted at %s=%d; steps so far are in %s", sw.Parameter, value, filepath.Join(out, "sweep.json"))
		}
		if !step.Pass {
			break
		}
	}
	renderSweep(os.Stdout, &res)
	return nil
}

func writeSweep(out string, res *sweepResult) error {
	data, err := json.MarshalIndent(res, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(out, "sweep.json"), append(data, '\n'), 0o644)
}

func renderSweep(w io.Writer, res *sweepResult) {
	fmt.Fprintf(w, "\nsweep of %s over profile %s\n", res.Parameter, res.Profile)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "%s\tverdict\tpod_startup p99 ms\tfailed\n", res.Parameter)
	for _, s := range res.Steps {
		verdict := "pass"
		if !s.Pass {
			verdict = "FAIL"
		}
		why := strings.Join(s.Failed, ", ")
		if s.Error != "" && why == "" {
			why = s.Error
		}
		fmt.Fprintf(tw, "%d\t%s\t%.1f\t%s\n", s.Value, verdict, s.PodStartupP99Ms, why)
	}
	_ = tw.Flush()
	if res.LargestPassing != nil {
		fmt.Fprintf(w, "largest passing step: %s=%d\n", res.Parameter, *res.LargestPassing)
	} else {
		fmt.Fprintf(w, "no step passed\n")
	}
}
