package main

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/fleetlet/fleetlet/loadprofiles"
)

// A pool's systemUsage overrides the default per resource, and the report's
// settings say which.
func TestSystemUsageOf(t *testing.T) {
	settings := map[string]string{}
	got := systemUsageOf(loadprofiles.NodePool{Name: "p"}, settings)
	if got.Cpu().Cmp(resource.MustParse("50m")) != 0 || got.Memory().Cmp(resource.MustParse("200Mi")) != 0 || len(settings) != 0 {
		t.Errorf("default system usage = %v, settings %v; want 50m and 200Mi, no settings", got, settings)
	}
	pool := loadprofiles.NodePool{Name: "p", SystemUsage: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("0")}}
	got = systemUsageOf(pool, settings)
	if got.Cpu().Cmp(resource.MustParse("50m")) != 0 || !got.Memory().IsZero() {
		t.Errorf("system usage with memory 0 = %v; want the default cpu and no memory", got)
	}
	if settings["p.systemUsage.memory"] != "0" {
		t.Errorf("settings = %v; want p.systemUsage.memory=0", settings)
	}
	// The default is a fresh list: an override never changes it.
	if def := loadprofiles.DefaultSystemUsage(); def.Memory().IsZero() {
		t.Error("an override changed DefaultSystemUsage")
	}
}
