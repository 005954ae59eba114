package repo

import (
	"fmt"
	"regexp"
	"sort"
	"strings"

	"github.com/drone/envsubst/v2"
	"github.com/drone/envsubst/v2/parse"
)

// Variable is one occurrence of a clusterctl variable (${NAME} or ${NAME:=default}) in a
// file. clusterctl substitutes them with drone/envsubst before it parses the YAML.
type Variable struct {
	Name string
	// HasDefault is true for ${NAME:=default}; such a variable is optional for clusterctl.
	HasDefault bool
	// Default is the default's source text (it may itself contain ${OTHER}).
	Default string
	// Line is the 1-based line of the occurrence.
	Line int
}

// String renders the occurrence as written.
func (v Variable) String() string {
	if v.HasDefault {
		return "${" + v.Name + ":=" + v.Default + "}"
	}
	return "${" + v.Name + "}"
}

var variableName = regexp.MustCompile(`^[A-Z][A-Z0-9_]*$`)

// ScanVariables finds every ${...} in text and checks it against the syntax rules this
// project follows (RuleVariableSyntax): upper-case names, no blanks inside the braces
// (clusterctl deprecated that form), only ${NAME} and ${NAME:=default}, and no "$$" (an
// envsubst escape that silently turns into "$"). Problems are returned as messages with
// their line; the occurrences that parsed are returned in file order, nested ones (in a
// default) after the one that contains them.
func ScanVariables(text string) ([]Variable, []string) {
	var (
		vars     []Variable
		problems []string
	)
	line := 1
	for i := 0; i < len(text); i++ {
		switch {
		case text[i] == '\n':
			line++
			continue
		case text[i] != '$' || i+1 >= len(text):
			continue
		case text[i+1] == '$':
			problems = append(problems, fmt.Sprintf("line %d: %q is an envsubst escape that clusterctl turns into a single $", line, "$$"))
			i++
			continue
		case text[i+1] != '{':
			// envsubst only substitutes ${...}; a lone $ stays as it is.
			continue
		}
		end := closingBrace(text, i)
		if end < 0 {
			problems = append(problems, fmt.Sprintf("line %d: %q has no closing brace", line, firstLine(text[i:])))
			continue
		}
		occurrence := text[i : end+1]
		found, errs := parseOccurrence(occurrence, line)
		vars = append(vars, found...)
		problems = append(problems, errs...)
		line += strings.Count(occurrence, "\n")
		i = end
	}
	return vars, problems
}

// closingBrace returns the index of the brace that closes the "${" at start, or -1.
func closingBrace(text string, start int) int {
	depth := 0
	for j := start; j < len(text); j++ {
		switch {
		case text[j] == '$' && j+1 < len(text) && text[j+1] == '{':
			depth++
			j++
		case text[j] == '}':
			depth--
			if depth == 0 {
				return j
			}
		case text[j] == '\n':
			return -1
		}
	}
	return -1
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}

// parseOccurrence checks one "${...}" with envsubst's own parser.
func parseOccurrence(occurrence string, line int) ([]Variable, []string) {
	inner := occurrence[2 : len(occurrence)-1]
	if strings.TrimSpace(inner) != inner || strings.ContainsAny(strings.SplitN(inner, ":", 2)[0], " \t") {
		return nil, []string{fmt.Sprintf("line %d: %s: no blanks inside ${...} (clusterctl deprecated that form)", line, occurrence)}
	}
	tree, err := parse.Parse(occurrence)
	if err != nil {
		return nil, []string{fmt.Sprintf("line %d: %s: envsubst cannot parse it: %v", line, occurrence, err)}
	}
	fn, ok := tree.Root.(*parse.FuncNode)
	if !ok {
		return nil, []string{fmt.Sprintf("line %d: %s: not a single variable", line, occurrence)}
	}
	return checkFunc(fn, occurrence, line)
}

func checkFunc(fn *parse.FuncNode, occurrence string, line int) ([]Variable, []string) {
	var problems []string
	if !variableName.MatchString(fn.Param) {
		problems = append(problems, fmt.Sprintf("line %d: %s: variable names are upper case letters, digits and _ (like CLUSTER_NAME)", line, occurrence))
	}
	v := Variable{Name: fn.Param, Line: line}
	var nested []Variable
	switch fn.Name {
	case "":
	case ":=":
		v.HasDefault = true
		var b strings.Builder
		for _, a := range fn.Args {
			switch n := a.(type) {
			case *parse.TextNode:
				b.WriteString(n.Value)
			case *parse.FuncNode:
				inner, errs := checkFunc(n, occurrence, line)
				problems = append(problems, errs...)
				nested = append(nested, inner...)
				if len(inner) > 0 {
					b.WriteString(inner[0].String())
				}
			}
		}
		v.Default = b.String()
		if v.Default == "" {
			// clusterctl treats an empty default as no default: the variable becomes required.
			problems = append(problems, fmt.Sprintf("line %d: %s: an empty default makes clusterctl require the variable; write ${%s:=\"\"} for an empty string", line, occurrence, fn.Param))
		}
	default:
		problems = append(problems, fmt.Sprintf("line %d: %s: only ${%s} and ${%s:=default} are used in this project (found %q)", line, occurrence, fn.Param, fn.Param, fn.Name))
	}
	return append([]Variable{v}, nested...), problems
}

// VariableSet summarizes the variables of one file.
type VariableSet struct {
	// Required are the variables without a default, sorted.
	Required []string
	// Optional maps the variables with a default to it.
	Optional map[string]string
}

// Summarize groups occurrences by name and reports names whose occurrences disagree on the
// default: clusterctl only reads the first occurrence, so a second, different default (or
// a second occurrence without one) would silently not apply (RuleVariableDefault).
func Summarize(vars []Variable) (VariableSet, []string) {
	first := map[string]Variable{}
	var problems []string
	set := VariableSet{Optional: map[string]string{}}
	for _, v := range vars {
		f, seen := first[v.Name]
		if !seen {
			first[v.Name] = v
			if v.HasDefault {
				set.Optional[v.Name] = v.Default
			} else {
				set.Required = append(set.Required, v.Name)
			}
			continue
		}
		if f.HasDefault != v.HasDefault || f.Default != v.Default {
			problems = append(problems, fmt.Sprintf("line %d: %s differs from line %d: %s; clusterctl uses the first occurrence only, so write every occurrence the same way",
				v.Line, v, f.Line, f))
		}
	}
	sort.Strings(set.Required)
	return set, problems
}

// Substitute evaluates text the way clusterctl does once every variable has a value:
// values[name] when present, otherwise the variable's default.
func Substitute(text string, values map[string]string) (string, error) {
	return envsubst.Eval(text, func(name string) string { return values[name] })
}
