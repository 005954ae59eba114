// Command render previews the bootstrap data of a KairosConfig offline: it runs the object
// through the provider's own admission webhook and reconciler, against an in-memory API, and
// prints exactly the Secret value a node would receive.
//
//	go run ./bootstrap/cmd/render -f kairosconfig.yaml
//
// The file holds one KairosConfig and optionally its Cluster and the Secrets it references
// (and the cluster's <cluster>-ca, -etcd, -proxy, -sa Secrets, to render with real PKI).
// Missing PKI and join tokens are generated and thrown away. Workers render as joining an
// initialized cluster; control-plane nodes render as the first node unless the Cluster's
// status.initialization.controlPlaneInitialized is true.
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/kairos-capi/kairos-capi/bootstrap/internal/preview"
)

func main() {
	file := flag.String("f", "", "YAML file with one KairosConfig and optionally its Cluster and Secrets; - reads standard input")
	version := flag.String("kubernetes-version", "", "the owning Machine's spec.version (default: the KairosConfig's spec.kubernetesVersion)")
	flag.Parse()
	if *file == "" {
		fmt.Fprintln(os.Stderr, "usage: render -f FILE (or -f - for standard input)")
		os.Exit(2)
	}
	if err := run(*file, *version); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func run(file, version string) error {
	var in io.Reader = os.Stdin
	if file != "-" {
		f, err := os.Open(file)
		if err != nil {
			return err
		}
		defer f.Close()
		in = f
	}
	res, err := preview.Render(context.Background(), bufio.NewReader(in), preview.Options{KubernetesVersion: version})
	if res != nil {
		for _, w := range res.Warnings {
			fmt.Fprintln(os.Stderr, "Warning:", w)
		}
	}
	if err != nil {
		return err
	}
	if res == nil || res.Data == nil {
		return errors.New("no bootstrap data was rendered")
	}
	_, err = os.Stdout.Write(res.Data)
	return err
}
