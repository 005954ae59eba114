package merge

import (
	"slices"
)

// MergeValues merges src into dst in place with the package's rules: maps
// merge recursively, lists concatenate (dst's items first), and a scalar or a
// type mismatch set by both is a *ConflictError naming dstName and srcName.
// Values are what a YAML or JSON decoder produces into map[string]any. Maps
// and lists of src are copied, never shared with dst.
func MergeValues(dst map[string]any, dstName string, src map[string]any, srcName string) error {
	return mergeValues(dst, src, "", Source{Name: dstName}, Source{Name: srcName})
}

func mergeValues(dst, src map[string]any, p string, dn, sn Source) error {
	keys := make([]string, 0, len(src))
	for k := range src {
		keys = append(keys, k)
	}
	slices.Sort(keys) // deterministic: the first conflict in key order wins
	for _, k := range keys {
		sv := src[k]
		kp := join(p, k)
		dv, ok := dst[k]
		if !ok {
			dst[k] = deepCopy(sv)
			continue
		}
		dk, sk := valueKind(dv), valueKind(sv)
		if dk != sk || dk == "scalar" {
			ce := &ConflictError{Key: kp, First: dn, Second: sn}
			if dk != sk {
				ce.FirstKind, ce.SecondKind = dk, sk
			}
			return ce
		}
		switch sk {
		case "map":
			if err := mergeValues(dv.(map[string]any), sv.(map[string]any), kp, dn, sn); err != nil {
				return err
			}
		case "list":
			merged := append(slices.Clip(dv.([]any)), deepCopy(sv).([]any)...)
			dst[k] = merged
		}
	}
	return nil
}

func valueKind(v any) string {
	switch v.(type) {
	case map[string]any:
		return "map"
	case []any:
		return "list"
	default:
		return "scalar"
	}
}

func deepCopy(v any) any {
	switch t := v.(type) {
	case map[string]any:
		c := make(map[string]any, len(t))
		for k, x := range t {
			c[k] = deepCopy(x)
		}
		return c
	case []any:
		c := make([]any, len(t))
		for i, x := range t {
			c[i] = deepCopy(x)
		}
		return c
	default:
		return v
	}
}
