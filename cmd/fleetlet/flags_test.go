package main

import (
	"strings"
	"testing"

	"github.com/spf13/viper"
)

func TestCheckFleetFlags(t *testing.T) {
	cases := []struct {
		key, value, want string
	}{
		{"cri", "containerd", "unknown --cri"},
		{"first-ip", "10.1.0.1", "not an IPv4 loopback"},
		{"debug-addr", "0.0.0.0:6060", "--debug-addr"},
		{"debug-addr", "6060", "--debug-addr"},
		{"debug-addr", "127.0.0.1:6060", ""},
	}
	for _, tc := range cases {
		v := viper.New()
		v.Set("cri", criInProc)
		v.Set("first-ip", "127.1.0.1")
		v.Set(tc.key, tc.value)
		err := checkFleetFlags(v)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s=%s: %v", tc.key, tc.value, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s=%s: err = %v, want it to say %q", tc.key, tc.value, err, tc.want)
		}
	}
}
