package loadprofiles

import (
	"bytes"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"reflect"
	"sort"
	"strings"

	"sigs.k8s.io/yaml"
)

// builtinFS holds the profiles shipped in the binary, one file per profile
// named after it. It is the package's only package-level state, and it is
// read-only.
//
//go:embed builtin/*.yaml
var builtinFS embed.FS

// BuiltinNames lists the built-in profiles, sorted.
func BuiltinNames() []string {
	entries, err := fs.ReadDir(builtinFS, "builtin")
	if err != nil {
		// The directory is embedded at build time; failing to read it is
		// a broken binary, not a user error.
		panic(fmt.Sprintf("loadprofiles: reading embedded profiles: %v", err))
	}
	var names []string
	for _, e := range entries {
		if name, ok := strings.CutSuffix(e.Name(), ".yaml"); ok && !e.IsDir() {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	return names
}

// Load returns the profile nameOrPath names: a built-in profile when it is one
// of BuiltinNames, otherwise the YAML file at that path. A bare name wins over
// a file of the same name in the working directory; write ./name for the file.
// The profile is defaulted and validated.
func Load(nameOrPath string) (*Profile, error) {
	if nameOrPath == "" {
		return nil, fmt.Errorf("no profile given: the built-in profiles are %s; a path to a YAML profile works too",
			strings.Join(BuiltinNames(), ", "))
	}
	if isBareName(nameOrPath) {
		if data, err := builtinFS.ReadFile(path.Join("builtin", nameOrPath+".yaml")); err == nil {
			return Parse(data, "built-in profile "+nameOrPath)
		}
	}
	data, err := os.ReadFile(nameOrPath)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) && isBareName(nameOrPath) {
			return nil, fmt.Errorf("unknown profile %q: the built-in profiles are %s; a path to a YAML profile works too",
				nameOrPath, strings.Join(BuiltinNames(), ", "))
		}
		return nil, fmt.Errorf("reading profile: %w", err)
	}
	return Parse(data, nameOrPath)
}

// isBareName tells a profile name from a path: names have no directory part
// and no YAML extension.
func isBareName(s string) bool {
	if s == "" || strings.ContainsAny(s, `/\`) || filepath.Base(s) != s {
		return false
	}
	ext := strings.ToLower(filepath.Ext(s))
	return ext != ".yaml" && ext != ".yml" && ext != ".json"
}

// Parse decodes a profile strictly, defaults it and validates it. source
// names the data in errors (a path, or "built-in profile NAME").
//
// Decoding goes YAML -> JSON -> Go with sigs.k8s.io/yaml and encoding/json,
// not through viper: viper lowercases every key, which would turn the pod
// template's camelCase fields (imagePullPolicy, nodeSelector, ...) into
// unknown fields. viper stays the CLI's configuration layer and hands us only
// the profile's name or path.
//
// encoding/json alone is too lenient for a file people write by hand: it
// matches keys case-insensitively and reports errors without a field path. So
// before the real decode, checkFields walks the JSON against the Go types and
// reports the first unknown field or bad value by its path, exactly as spelled.
func Parse(data []byte, source string) (*Profile, error) {
	jsonData, err := yaml.YAMLToJSONStrict(data)
	if err != nil {
		return nil, fmt.Errorf("profile %s: %s", source, yamlProblem(err))
	}
	var tree any
	dec := json.NewDecoder(bytes.NewReader(jsonData))
	dec.UseNumber() // keep integers exact when a leaf is re-encoded
	if err := dec.Decode(&tree); err != nil {
		return nil, fmt.Errorf("profile %s: %v", source, err)
	}
	if problems := checkFields(reflect.TypeFor[Profile](), tree, nil); len(problems) > 0 {
		msg := problems[0]
		if len(problems) > 1 {
			msg += fmt.Sprintf(" (and %d more problems)", len(problems)-1)
		}
		return nil, fmt.Errorf("profile %s: %s", source, msg)
	}

	p := &Profile{}
	dec = json.NewDecoder(bytes.NewReader(jsonData))
	dec.DisallowUnknownFields()
	if err := dec.Decode(p); err != nil {
		// checkFields should have caught this; keep the decoder's words.
		return nil, fmt.Errorf("profile %s: %v", source, err)
	}
	zeros := explicitZeros(p, tree)
	p.Default()
	err = p.Validate()
	if len(zeros) > 0 {
		// One list, so that every problem is reported at once.
		var inv *invalidError
		if errors.As(err, &inv) {
			zeros = append(zeros, inv.errs...)
		}
		err = &invalidError{errs: zeros}
	}
	if err != nil {
		return nil, withSource(err, source)
	}
	return p, nil
}

// yamlProblem turns a YAML parser error into one line: the wrapping prefixes
// go, and the parser's own multi-line lists ("unmarshal errors:\n  line 3:
// ...") are joined with "; ".
func yamlProblem(err error) string {
	msg := err.Error()
	msg = strings.TrimPrefix(msg, "error converting YAML to JSON: ")
	msg = strings.TrimPrefix(msg, "yaml: ")
	msg = strings.TrimPrefix(msg, "unmarshal errors:")
	var parts []string
	for _, line := range strings.Split(msg, "\n") {
		if line = strings.TrimSpace(line); line != "" {
			parts = append(parts, line)
		}
	}
	return strings.Join(parts, "; ")
}
