package loadprofiles

import (
	"encoding"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"sort"
	"strings"

	"github.com/fleetlet/fleetlet/internal/yamltype"

	"k8s.io/apimachinery/pkg/util/validation/field"
	kubeletconfig "k8s.io/kubelet/config/v1beta1"
)

// checkFields walks a decoded JSON value (maps, slices, json.Number, strings,
// bools, nil) alongside the Go type it will be decoded into, and returns one
// line per problem, each naming the field path: keys that match no field
// exactly (case included), and values the type cannot take. Types that decode
// themselves (resource.Quantity, metav1.Duration, intstr.IntOrString, ...) are
// checked by decoding just that value, so their own error text appears next
// to the path.
//
// KubeletOverrides, which keeps its raw JSON, is walked as the
// KubeletConfiguration it holds.
//
// It exists because encoding/json reports neither the path of a failing
// custom decoder nor of an unknown field, and matches keys case-insensitively.
// Keys are visited in sorted order so that the first problem is stable.
func checkFields(t reflect.Type, v any, path *field.Path) []string {
	if v == nil {
		// JSON null leaves the Go zero value, except in a type that decodes
		// itself (not behind a pointer, which is set to nil): it is given the
		// null, and metav1.Duration, for one, refuses it.
		if t.Kind() != reflect.Pointer && customDecoder(t) && decodeLeaf(t, v, path) != nil {
			return []string{field.Invalid(path, v, "give it a value, or leave it out").Error()}
		}
		return nil
	}
	if t == reflect.TypeFor[KubeletOverrides]() || t == reflect.TypeFor[*KubeletOverrides]() {
		// It decodes itself, keeping the settings as written, but their
		// schema is KubeletConfiguration's: walk that, so that each
		// setting's problem is named by its path.
		t = reflect.TypeFor[kubeletconfig.KubeletConfiguration]()
	}
	if customDecoder(t) {
		return decodeLeaf(t, v, path)
	}
	switch t.Kind() {
	case reflect.Pointer:
		return checkFields(t.Elem(), v, path)
	case reflect.Interface:
		return nil
	case reflect.Struct:
		obj, ok := v.(map[string]any)
		if !ok {
			return decodeLeaf(t, v, path)
		}
		fields := jsonFields(t)
		var problems []string
		for _, key := range sortedKeys(obj) {
			ft, ok := fields[key]
			if !ok {
				problems = append(problems, fmt.Sprintf("unknown field %q", child(path, key).String()))
				continue
			}
			problems = append(problems, checkFields(ft, obj[key], child(path, key))...)
		}
		return problems
	case reflect.Map:
		obj, ok := v.(map[string]any)
		if !ok || t.Key().Kind() != reflect.String {
			return decodeLeaf(t, v, path)
		}
		var problems []string
		for _, key := range sortedKeys(obj) {
			problems = append(problems, checkFields(t.Elem(), obj[key], keyed(path, key))...)
		}
		return problems
	case reflect.Slice, reflect.Array:
		list, ok := v.([]any)
		if !ok || t.Elem().Kind() == reflect.Uint8 {
			return decodeLeaf(t, v, path)
		}
		var problems []string
		for i, item := range list {
			problems = append(problems, checkFields(t.Elem(), item, indexed(path, i))...)
		}
		return problems
	default:
		return decodeLeaf(t, v, path)
	}
}

// customDecoder reports whether values of t decode themselves.
func customDecoder(t reflect.Type) bool {
	pt := reflect.PointerTo(t)
	ju, tu := reflect.TypeFor[json.Unmarshaler](), reflect.TypeFor[encoding.TextUnmarshaler]()
	return t.Implements(ju) || pt.Implements(ju) || t.Implements(tu) || pt.Implements(tu)
}

// decodeLeaf decodes v into a fresh t and turns a failure into one line.
func decodeLeaf(t reflect.Type, v any, path *field.Path) []string {
	raw, err := json.Marshal(v)
	if err == nil {
		err = json.Unmarshal(raw, reflect.New(t).Interface())
	}
	if err == nil {
		return nil
	}
	detail := err.Error()
	if typeErr := (*json.UnmarshalTypeError)(nil); errors.As(err, &typeErr) {
		detail = "must be " + yamltype.Describe(t)
	}
	if path == nil {
		return []string{"the document " + detail}
	}
	return []string{field.Invalid(path, badValue(v), detail).Error()}
}

// badValue is v as field.Invalid should print it: scalars as themselves,
// mappings and lists abbreviated, since the path already says where they are.
func badValue(v any) any {
	switch v := v.(type) {
	case json.Number:
		return v.String()
	case map[string]any:
		return "<mapping>"
	case []any:
		return "<list>"
	}
	return v
}

// jsonFields maps the JSON names of t's fields, including those promoted from
// embedded structs (metav1.TypeMeta's `json:",inline"`), to their types, the
// way encoding/json resolves them for the cases Kubernetes types use.
func jsonFields(t reflect.Type) map[string]reflect.Type {
	fields := map[string]reflect.Type{}
	for i := range t.NumField() {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		if tag == "-" {
			continue
		}
		name, _, _ := strings.Cut(tag, ",")
		ft := f.Type
		if f.Anonymous && name == "" {
			if ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			if ft.Kind() == reflect.Struct {
				for k, v := range jsonFields(ft) {
					if _, shadowed := fields[k]; !shadowed {
						fields[k] = v
					}
				}
				continue
			}
		}
		if !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		fields[name] = ft
	}
	return fields
}

func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// child, keyed and indexed extend a path that is nil at the document root.
func child(p *field.Path, name string) *field.Path {
	if p == nil {
		return field.NewPath(name)
	}
	return p.Child(name)
}

func keyed(p *field.Path, key string) *field.Path {
	if p == nil {
		return field.NewPath(key)
	}
	return p.Key(key)
}

func indexed(p *field.Path, i int) *field.Path {
	if p == nil {
		return field.NewPath(fmt.Sprintf("[%d]", i))
	}
	return p.Index(i)
}
