package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/kairos-capi/kairos-capi/release/modules"
	"github.com/kairos-capi/kairos-capi/release/preflight"
	"github.com/kairos-capi/kairos-capi/release/repo"
)

// versionSets collects -set folder=vX.Y.Z flags.
type versionSets [][2]string

func (s *versionSets) String() string {
	parts := make([]string, 0, len(*s))
	for _, kv := range *s {
		parts = append(parts, kv[0]+"="+kv[1])
	}
	return strings.Join(parts, ",")
}

func (s *versionSets) Set(v string) error {
	folder, version, ok := strings.Cut(v, "=")
	if !ok || folder == "" || version == "" {
		return fmt.Errorf("%q is not folder=vX.Y.Z", v)
	}
	*s = append(*s, [2]string{strings.TrimSuffix(folder, "/"), version})
	return nil
}

// runModules is `release modules`: see the package comment.
func runModules(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("release modules", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var sets versionSets
	fs.Var(&sets, "set", "`folder=vX.Y.Z`: set the version of the module in folder in "+modules.File+" (repeat for several modules)")
	check := fs.Bool("check", false, "change nothing; fail naming every difference between the tree and "+modules.File)
	root := fs.String("root", "", "repository root (default: the folder with go.work at or above the working directory)")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: release modules [-set folder=vX.Y.Z ...] [-check]\n\n"+
			"Rewrites the requirements between this repository's modules to the versions of %s\n"+
			"and prints the tags of the published modules, one a line.\n\n", modules.File)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		fs.Usage()
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if *check && len(sets) > 0 {
		return errors.New("-check changes nothing: it does not take -set")
	}
	if err := findRoot(root); err != nil {
		return err
	}
	l, err := modules.Load(*root)
	if err != nil {
		return err
	}

	if *check {
		problems, err := modules.Check(*root, l)
		if err != nil {
			return err
		}
		if len(problems) > 0 {
			return &modules.CheckError{Problems: problems}
		}
		fmt.Fprintf(stderr, "release: modules: every go.mod and go.work matches %s (%d modules)\n", modules.File, len(l.Modules))
		return nil
	}

	for _, kv := range sets {
		if err := l.SetVersion(kv[0], kv[1]); err != nil {
			return err
		}
	}
	if len(sets) > 0 {
		if err := l.Save(*root); err != nil {
			return err
		}
		fmt.Fprintf(stderr, "release: modules: wrote %s\n", modules.File)
	}
	written, err := modules.Apply(*root, l)
	for _, f := range written {
		fmt.Fprintf(stderr, "release: modules: wrote %s\n", f)
	}
	if err != nil {
		return err
	}
	// What Apply cannot fix (go.work, module lines, a published module requiring an
	// unpublished one) is left for a person.
	problems, err := modules.Check(*root, l)
	if err != nil {
		return err
	}
	if len(problems) > 0 {
		return &modules.CheckError{Problems: problems}
	}
	fmt.Fprintf(stderr, "release: modules: tags of the published modules, to push at the commit being released:\n")
	for _, t := range l.Tags() {
		fmt.Fprintln(stdout, t)
	}
	return nil
}

// runPreflight is `release preflight`: see the package comment.
func runPreflight(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("release preflight", flag.ContinueOnError)
	var (
		provider = fs.String("provider", "", "provider being released: bootstrap or controlplane")
		version  = fs.String("version", "", "release version, vX.Y.Z (the tag is <provider>/vX.Y.Z)")
		root     = fs.String("root", "", "repository root (default: the folder with go.work at or above the working directory)")
	)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: release preflight -provider bootstrap|controlplane -version vX.Y.Z\n\n"+
			"Fails unless the tag <provider>/vX.Y.Z is HEAD, the tree is clean, %s lists that\n"+
			"version and the modules check holds: what goreleaser's own validation (--skip=validate) would miss.\n\n", modules.File)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *provider == "" || *version == "" || fs.NArg() > 0 {
		fs.Usage()
		return errors.New("-provider and -version are required, and nothing else")
	}
	p, err := repo.Lookup(*provider)
	if err != nil {
		return err
	}
	if err := findRoot(root); err != nil {
		return err
	}
	commit, err := preflight.Check(preflight.Options{Root: *root, Provider: p, Version: *version})
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "preflight: %s is %s, the tree is clean and the modules match %s\n", p.Tag(*version), commit, modules.File)
	return nil
}
