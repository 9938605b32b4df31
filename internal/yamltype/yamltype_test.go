package yamltype

import (
	"reflect"
	"testing"
	"time"
)

func TestDescribe(t *testing.T) {
	for _, tc := range []struct {
		v    any
		want string
	}{
		{true, "true or false"}, {int32(1), "an integer"}, {uint8(1), "an integer"}, {1.5, "a number"},
		{"s", "a string"}, {[]int{}, "a list"}, {map[string]int{}, "a mapping"}, {struct{}{}, "a mapping"},
		{new(*int), "an integer"}, {make(chan int), "a chan int"}, {time.Duration(0), "an integer"},
	} {
		if got := Describe(reflect.TypeOf(tc.v)); got != tc.want {
			t.Errorf("Describe(%T) = %q, want %q", tc.v, got, tc.want)
		}
	}
}
