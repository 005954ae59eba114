// Command release is the release tooling of the Kairos providers.
//
//	release -provider bootstrap|controlplane -version vX.Y.Z -out DIR
//
// writes DIR/<provider label>/<version>/ (bootstrap-kairos or control-plane-kairos) with the
// components YAML, metadata.yaml and, for the control plane, the cluster templates. Other
// versions and providers already in DIR are kept. Nothing is written when a contract rule is
// broken; the error names every rule and object.
//
//	release modules [-set folder=vX.Y.Z ...] [-check]
//
// keeps the Go modules consumable from tags (release/modules.yaml; see package modules):
// rewrites the requirements between the repository's modules to the listed versions and
// prints the tags of the published modules, one a line; -check changes nothing and fails
// naming each drift.
//
//	release preflight -provider bootstrap|controlplane -version vX.Y.Z
//
// checks what must hold before goreleaser runs with --skip=validate: the provider's tag
// <provider>/vX.Y.Z is HEAD, the tree is clean, release/modules.yaml lists that version and
// the modules check holds (see package preflight).
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/kairos-capi/kairos-capi/release/repo"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "release:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	if len(args) > 0 {
		switch args[0] {
		case "modules":
			return runModules(args[1:], os.Stdout, os.Stderr)
		case "preflight":
			return runPreflight(args[1:], os.Stdout)
		}
	}
	fs := flag.NewFlagSet("release", flag.ContinueOnError)
	var (
		provider = fs.String("provider", "", "provider to release: bootstrap or controlplane")
		version  = fs.String("version", "", "release version, vX.Y.Z; its major.minor series must be in release/metadata/<provider>.yaml")
		out      = fs.String("out", "", "repository tree to add the release to (created if missing)")
		root     = fs.String("root", "", "repository root (default: the folder with go.work at or above the working directory)")
		image    = fs.String("image-repository", "", "manager image repository (default: ghcr.io/kairos-capi/kairos-<provider>-manager); the version is the tag")
	)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: release -provider bootstrap|controlplane -version vX.Y.Z -out DIR\n\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *provider == "" || *version == "" || *out == "" {
		fs.Usage()
		return errors.New("-provider, -version and -out are required")
	}
	p, err := repo.Lookup(*provider)
	if err != nil {
		return err
	}
	if err := findRoot(root); err != nil {
		return err
	}
	outDir, err := filepath.Abs(*out)
	if err != nil {
		return err
	}

	r, err := repo.Build(repo.Options{Root: *root, Provider: p, Version: *version, ImageRepository: *image})
	if err != nil {
		return err
	}
	for _, w := range r.Warnings {
		fmt.Fprintln(os.Stderr, "release: warning:", w)
	}
	dir, err := r.Write(outDir)
	if err != nil {
		return err
	}
	fmt.Printf("%s %s (tag %s) -> %s\n", p.Label, *version, p.Tag(*version), dir)
	for _, name := range r.FileNames() {
		fmt.Printf("  %s\n", name)
	}
	return nil
}

// findRoot sets *root to the repository root above the working directory unless it is set.
func findRoot(root *string) error {
	if *root != "" {
		return nil
	}
	var err error
	*root, err = repo.FindRoot(".")
	return err
}
