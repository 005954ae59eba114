package cloudconfig

import (
	"bytes"
	"compress/gzip"
	"encoding/base64"
	"fmt"
	"io"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync"

	"github.com/mudler/yip/pkg/logger"
	"github.com/mudler/yip/pkg/plugins"
	yipschema "github.com/mudler/yip/pkg/schema"
	yipcloudinit "github.com/mudler/yip/pkg/schema/cloudinit"
	"github.com/mudler/yip/pkg/utils"
	"github.com/twpayne/go-vfs/v5"
)

// The yip plugins share global state (the system facts, litter's
// configuration); run them one at a time.
var pluginsMu sync.Mutex

// rendered is one templated item of a document: a file content, a command or
// an "if" condition, before and after yip's templating.
type rendered struct {
	kind  string // "file", "command", "if" or "hostname"
	where string
	path  string // files only
	// source is the text yip templates (a file's content after decoding).
	source string
	// node is what the node ends up with.
	node string
	// warnings are what yip logged meanwhile (a failed rendering is only a
	// warning on the node: yip then uses the text as it is).
	warnings []string
	err      error
}

// renderAll runs yip's file and command plugins over every step of the
// loaded configuration, in the order a node runs the stages, against a
// scratch directory and a console that only records. cloudInit tells that
// the document is a cloud-config, whose first boot step yip generates from
// write_files and runcmd.
func renderAll(cfg *yipschema.YipConfig, cloudInit bool) ([]rendered, error) {
	dir, err := os.MkdirTemp("", "kairos-cloudconfig-")
	if err != nil {
		return nil, err
	}
	defer func() { _ = os.RemoveAll(dir) }()
	fs := vfs.NewPathFS(vfs.OSFS, dir)

	pluginsMu.Lock()
	defer pluginsMu.Unlock()

	names := map[string]bool{}
	for n := range cfg.Stages {
		names[n] = true
	}
	var out []rendered
	for _, stage := range sortedStageNames(names) {
		for i, step := range cfg.Stages[stage] {
			where := fmt.Sprintf("stage %s step %d", stage, i)
			if step.Name != "" {
				where += fmt.Sprintf(" (%s)", step.Name)
			}
			if cloudInit && stage == "boot" && i == 0 {
				where = "write_files/runcmd (" + where + ")"
			}
			if step.Hostname != "" {
				out = append(out, renderHostname(step.Hostname, where))
			}
			if step.If != "" {
				out = append(out, runCommandPlugin(plugins.IfConditional, yipschema.Stage{If: step.If}, "if", where, step.If))
			}
			for _, f := range step.Files {
				out = append(out, renderFile(fs, f, where))
			}
			for _, c := range step.Commands {
				out = append(out, runCommandPlugin(plugins.Commands, yipschema.Stage{Commands: []string{c}}, "command", where, c))
			}
		}
	}
	return out, nil
}

func runCommandPlugin(run func(logger.Interface, yipschema.Stage, vfs.FS, plugins.Console) error, s yipschema.Stage, kind, where, source string) rendered {
	l := &recordingLogger{}
	c := &recordingConsole{}
	err := run(l, s, nil, c)
	r := rendered{kind: kind, where: where, source: source, warnings: l.warnings, err: err}
	if len(c.commands) != 1 {
		r.err = fmt.Errorf("yip ran %d commands instead of 1", len(c.commands))
	} else {
		r.node = c.commands[0]
	}
	return r
}

// renderHostname renders a hostname with the fields yip's hostname plugin
// offers, with placeholder values.
func renderHostname(hostname, where string) rendered {
	r := rendered{kind: "hostname", where: where, source: hostname}
	r.node, r.err = utils.TemplatedString(hostname, struct {
		UUID, Random, MachineID, ProtectedID string
	}{"00000000-0000-4000-8000-000000000000", "random", "machineid", "protectedid"})
	return r
}

func renderFile(fs *vfs.PathFS, f yipschema.File, where string) rendered {
	r := rendered{kind: "file", where: where, path: f.Path}
	src, err := decodeContent(f.Encoding, f.Content)
	if err != nil {
		r.err = fmt.Errorf("content cannot be decoded as %q: %w", f.Encoding, err)
		return r
	}
	r.source = string(src)

	// Ownership and mode are not what is checked here: keep the scratch file
	// readable and owned by us.
	f.Owner, f.Group, f.OwnerString = os.Getuid(), os.Getgid(), ""
	f.Permissions = 0o600
	l := &recordingLogger{}
	err = plugins.EnsureFiles(l, yipschema.Stage{Files: []yipschema.File{f}}, fs, &recordingConsole{})
	r.warnings = l.warnings
	if err != nil {
		r.err = err
		return r
	}
	content, err := fs.ReadFile(f.Path)
	if err != nil {
		r.err = err
		return r
	}
	r.node = string(content)
	return r
}

// decodeContent decodes a file content the way yip does before templating.
func decodeContent(encoding, content string) ([]byte, error) {
	switch encoding {
	case "b64", "base64":
		return base64.StdEncoding.DecodeString(content)
	case "gz", "gzip":
		return gunzip([]byte(content))
	case "gz+base64", "gzip+base64", "gz+b64", "gzip+b64":
		b, err := base64.StdEncoding.DecodeString(content)
		if err != nil {
			return nil, err
		}
		return gunzip(b)
	default:
		return []byte(content), nil
	}
}

func gunzip(b []byte) ([]byte, error) {
	r, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		return nil, err
	}
	defer func() { _ = r.Close() }()
	return io.ReadAll(r)
}

// escapedDelim matches a template action that only prints a literal "{{" or
// "}}", the way our renderer escapes them: {{"{{"}} (spaces and backquotes
// allowed).
var escapedDelim = regexp.MustCompile("\\{\\{\\s*(?:\"(\\{\\{|\\}\\})\"|`(\\{\\{|\\}\\})`)\\s*\\}\\}")

// intended is the text the author of a document means the node to get: the
// text with its escaped delimiters turned back into literal ones, and no
// other templating.
func intended(source string) string {
	return escapedDelim.ReplaceAllString(source, "${1}${2}")
}

func checkTemplating(cfg *yipschema.YipConfig, cloudInit bool, p *problems) {
	items, err := renderAll(cfg, cloudInit)
	if err != nil {
		p.add("templating: %v", err)
		return
	}
	for _, r := range items {
		what := r.kind
		if r.path != "" {
			what += " " + r.path
		}
		if r.err != nil {
			p.add("%s, %s: yip fails on it: %v", r.where, what, r.err)
			continue
		}
		if r.kind == "hostname" {
			// Hostnames are templated on purpose ({{ .MachineID }}); only
			// a failure matters: yip then sets no hostname.
			continue
		}
		for _, w := range r.warnings {
			p.add("%s, %s: yip warns: %s", r.where, what, w)
		}
		if want := intended(r.source); r.node != want {
			hint := ""
			if strings.Contains(r.node, "<no value>") && !strings.Contains(want, "<no value>") {
				hint = "\n(<no value>: the expression names nothing in yip's data, which is .Values.<sysinfo fields>, .Values.Random and .Values.ProtectedID)"
			}
			p.add("%s, %s: yip's templating changes it on the node (escape literal braces as {{\"{{\"}}):\n%s%s", r.where, what, diff(want, r.node), hint)
		}
	}
}

// diff shows the first line where two texts differ.
func diff(want, got string) string {
	wl, gl := strings.Split(want, "\n"), strings.Split(got, "\n")
	for i := 0; i < len(wl) || i < len(gl); i++ {
		var w, g string
		if i < len(wl) {
			w = wl[i]
		}
		if i < len(gl) {
			g = gl[i]
		}
		if w != g || i >= len(wl) || i >= len(gl) {
			return fmt.Sprintf("line %d: intended %q, node gets %q", i+1, w, g)
		}
	}
	return "texts differ"
}

// RenderedFiles returns every file the document writes (top-level
// write_files and the files of every stage), by path, with the content a
// node writes: decoded, then rendered by yip's templating. When two steps
// write the same path, the one that runs later wins.
func RenderedFiles(doc []byte) (map[string]string, error) {
	items, err := renderDoc(doc)
	if err != nil {
		return nil, err
	}
	files := map[string]string{}
	for _, r := range items {
		if r.kind == "file" {
			files[r.path] = r.node
		}
	}
	return files, nil
}

// RenderedCommands returns every command the document runs (runcmd and the
// commands of every stage), in the order a node runs them, as yip hands them
// to the shell after templating. "if" conditions are not included.
func RenderedCommands(doc []byte) ([]string, error) {
	items, err := renderDoc(doc)
	if err != nil {
		return nil, err
	}
	var cmds []string
	for _, r := range items {
		if r.kind == "command" {
			cmds = append(cmds, r.node)
		}
	}
	return cmds, nil
}

func renderDoc(doc []byte) ([]rendered, error) {
	cfg, err := load(doc)
	if err != nil {
		return nil, fmt.Errorf("yip cannot load the document: %w", err)
	}
	items, err := renderAll(cfg, yipcloudinit.IsCloudConfig(string(doc)))
	if err != nil {
		return nil, err
	}
	for _, r := range items {
		if r.err != nil {
			what := r.kind
			if r.path != "" {
				what += " " + r.path
			}
			return nil, fmt.Errorf("%s, %s: %w", r.where, what, r.err)
		}
	}
	return items, nil
}

// recordingConsole stands in for the node's shell: it records the commands
// yip would run and runs none.
type recordingConsole struct {
	commands []string
}

func (c *recordingConsole) Run(cmd string, _ ...func(*exec.Cmd)) (string, error) {
	c.commands = append(c.commands, cmd)
	return "", nil
}

func (c *recordingConsole) Start(cmd *exec.Cmd, _ ...func(*exec.Cmd)) error {
	c.commands = append(c.commands, cmd.String())
	return nil
}

func (c *recordingConsole) RunTemplate(items []string, format string) error {
	for _, it := range items {
		c.commands = append(c.commands, fmt.Sprintf(format, it))
	}
	return nil
}

// recordingLogger keeps what yip reports as a warning or an error.
type recordingLogger struct {
	warnings []string
}

func (l *recordingLogger) record(args ...any) { l.warnings = append(l.warnings, fmt.Sprint(args...)) }
func (l *recordingLogger) recordf(format string, args ...any) {
	l.warnings = append(l.warnings, fmt.Sprintf(format, args...))
}

func (l *recordingLogger) Info(...any)                  {}
func (l *recordingLogger) Debug(...any)                 {}
func (l *recordingLogger) Trace(...any)                 {}
func (l *recordingLogger) Infof(string, ...any)         {}
func (l *recordingLogger) Debugf(string, ...any)        {}
func (l *recordingLogger) Tracef(string, ...any)        {}
func (l *recordingLogger) Warn(args ...any)             { l.record(args...) }
func (l *recordingLogger) Error(args ...any)            { l.record(args...) }
func (l *recordingLogger) Fatal(args ...any)            { l.record(args...) }
func (l *recordingLogger) Panic(args ...any)            { l.record(args...) }
func (l *recordingLogger) Warnf(f string, args ...any)  { l.recordf(f, args...) }
func (l *recordingLogger) Errorf(f string, args ...any) { l.recordf(f, args...) }
func (l *recordingLogger) Fatalf(f string, args ...any) { l.recordf(f, args...) }
func (l *recordingLogger) Panicf(f string, args ...any) { l.recordf(f, args...) }
