package render

import (
	"errors"
	"fmt"
)

// FieldError is a problem with one field of a Node, or with one fragment
// passed to Document ("Fragments[i]"). Callers that map Nodes from an API
// translate Field into their own field paths, so that a rejection names the
// field the user wrote.
type FieldError struct {
	// Field is the Node field, with indexes and keys: "Args[2]",
	// "Files[0].Content", "Network.PodCIDRs[1]", "Fragments[1]", "Env.K3S_URL".
	Field string
	// Path is the key path inside the field's YAML content, when the problem
	// is there: "stages.boot[0].files[1].permissions" in a fragment,
	// "spec.network.podCIDR" in a k0s Config. Empty otherwise.
	Path string
	Err  error
}

func (e *FieldError) Error() string {
	if e.Path != "" {
		return e.Field + ": " + e.Path + ": " + e.Err.Error()
	}
	return e.Field + ": " + e.Err.Error()
}

func (e *FieldError) Unwrap() error { return e.Err }

// FieldErrors returns the FieldErrors err holds, joined or wrapped, in order.
func FieldErrors(err error) []*FieldError {
	var out []*FieldError
	var walk func(error)
	walk = func(e error) {
		if e == nil {
			return
		}
		if fe, ok := e.(*FieldError); ok {
			out = append(out, fe)
			return
		}
		switch x := e.(type) {
		case interface{ Unwrap() []error }:
			for _, c := range x.Unwrap() {
				walk(c)
			}
		case interface{ Unwrap() error }:
			walk(x.Unwrap())
		}
	}
	walk(err)
	return out
}

// problems collects FieldErrors.
type problems []error

func (p *problems) add(field, format string, args ...any) {
	*p = append(*p, &FieldError{Field: field, Err: fmt.Errorf(format, args...)})
}

// addAt records a problem at a key path inside the field's YAML content.
func (p *problems) addAt(field, path, format string, args ...any) {
	*p = append(*p, &FieldError{Field: field, Path: path, Err: fmt.Errorf(format, args...)})
}

// wrap records err for field, keeping it inspectable (errors.As finds a
// *merge.ConflictError); FieldErrors inside err are kept as they are.
func (p *problems) wrap(field string, err error) {
	if fes := FieldErrors(err); len(fes) > 0 {
		for _, fe := range fes {
			*p = append(*p, fe)
		}
		return
	}
	*p = append(*p, &FieldError{Field: field, Err: err})
}

func (p problems) err() error { return errors.Join(p...) }
