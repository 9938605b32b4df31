package objects

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"text/template"
)

// funcs returns the template functions, clusterloader2's of the same names
// (perf-tests clusterloader2/pkg/config/template_functions.go) with the same
// arithmetic: arguments of any number type, or a string holding a number,
// are computed on as float64 and the *Int functions truncate the result
// towards zero, so that {{MultiplyInt .Replicas 0.5}} of 5 is 2 there and
// here. They differ in two ways: bad arguments are errors, where
// clusterloader2 panics, and the random functions draw from rng, where
// clusterloader2 draws from a process-wide source seeded with the time, so
// that a run replays from its seed.
func funcs(rng *rand.Rand) template.FuncMap {
	return template.FuncMap{
		"AddInt":      addInt,
		"SubtractInt": subtractInt,
		"MultiplyInt": multiplyInt,
		"DivideInt":   divideInt,
		"MaxInt":      maxInt,
		"MinInt":      minInt,
		// RandInt n is in [0, n] and RandIntRange lo hi in [lo, hi], both
		// bounds included, as clusterloader2's, so that its templates
		// render here with the same ranges; RandIntRange is lo when
		// lo >= hi, as there.
		"RandInt": func(n any) (int, error) {
			if rng == nil {
				return 0, errNoRand
			}
			i, err := toInt("RandInt", n)
			if err != nil {
				return 0, err
			}
			if i < 0 {
				return 0, fmt.Errorf("RandInt %d: the bound must not be negative", i)
			}
			return rng.IntN(i + 1), nil
		},
		"RandIntRange": func(lo, hi any) (int, error) {
			if rng == nil {
				return 0, errNoRand
			}
			l, err := toInt("RandIntRange", lo)
			if err != nil {
				return 0, err
			}
			h, err := toInt("RandIntRange", hi)
			if err != nil {
				return 0, err
			}
			if l >= h {
				return l, nil
			}
			return l + rng.IntN(h-l+1), nil
		},
		"DefaultParam": defaultParam,
		"Seq":          seq,
	}
}

// toFloat converts a template argument as clusterloader2's toFloat64 does.
func toFloat(fn string, v any) (float64, error) {
	switch x := v.(type) {
	case float64:
		return x, nil
	case float32:
		return float64(x), nil
	case int:
		return float64(x), nil
	case int8:
		return float64(x), nil
	case int16:
		return float64(x), nil
	case int32:
		return float64(x), nil
	case int64:
		return float64(x), nil
	case uint:
		return float64(x), nil
	case uint8:
		return float64(x), nil
	case uint16:
		return float64(x), nil
	case uint32:
		return float64(x), nil
	case uint64:
		return float64(x), nil
	case json.Number:
		if f, err := x.Float64(); err == nil {
			return f, nil
		}
	case string:
		if f, err := strconv.ParseFloat(x, 64); err == nil {
			return f, nil
		}
	}
	return 0, fmt.Errorf("%s: %v (%T) is not a number: pass a number or a param that holds one", fn, v, v)
}

func toInt(fn string, v any) (int, error) {
	f, err := toFloat(fn, v)
	return int(f), err
}

func toFloats(fn string, vs []any) ([]float64, error) {
	fs := make([]float64, len(vs))
	for i, v := range vs {
		f, err := toFloat(fn, v)
		if err != nil {
			return nil, err
		}
		fs[i] = f
	}
	return fs, nil
}

func addInt(numbers ...any) (int, error) {
	fs, err := toFloats("AddInt", numbers)
	sum := 0.0
	for _, f := range fs {
		sum += f
	}
	return int(sum), err
}

func subtractInt(a, b any) (int, error) {
	fs, err := toFloats("SubtractInt", []any{a, b})
	if err != nil {
		return 0, err
	}
	return int(fs[0] - fs[1]), nil
}

func multiplyInt(numbers ...any) (int, error) {
	fs, err := toFloats("MultiplyInt", numbers)
	product := 1.0
	for _, f := range fs {
		product *= f
	}
	return int(product), err
}

func divideInt(a, b any) (int, error) {
	fs, err := toFloats("DivideInt", []any{a, b})
	if err != nil {
		return 0, err
	}
	if fs[1] == 0 {
		return 0, errors.New("DivideInt: division by zero")
	}
	return int(fs[0] / fs[1]), nil
}

func maxInt(numbers ...any) (int, error) {
	return extremum("MaxInt", math.Max, numbers)
}

func minInt(numbers ...any) (int, error) {
	return extremum("MinInt", math.Min, numbers)
}

func extremum(fn string, pick func(a, b float64) float64, numbers []any) (int, error) {
	if len(numbers) == 0 {
		return 0, fmt.Errorf("%s needs at least one number", fn)
	}
	fs, err := toFloats(fn, numbers)
	if err != nil {
		return 0, err
	}
	result := fs[0]
	for _, f := range fs[1:] {
		result = pick(result, f)
	}
	return int(result), nil
}

// defaultParam is param, or def when param is nil (a missing key; see
// optionalParams).
func defaultParam(param, def any) any {
	if param == nil {
		return def
	}
	return param
}

// seq returns n zeros, as clusterloader2's (deprecated there in favour of
// SliceOfZeros and Loop, which are not offered here): templates range over
// it, `{{range $i, $_ := Seq 3}}`, and use the index.
func seq(n any) ([]int, error) {
	i, err := toInt("Seq", n)
	if err != nil {
		return nil, err
	}
	if i < 0 {
		return nil, fmt.Errorf("Seq %d: the length must not be negative", i)
	}
	return make([]int, i), nil
}
