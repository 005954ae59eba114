// Package etcdsnapshots reads a cluster's etcd snapshots from its S3-compatible store
// (docs/backups.md): a ListObjectsV2 client signed with AWS Signature Version 4 (the AWS SDK's
// signer), and the names nodes give their snapshots. The control plane lists the store itself,
// with the credentials Secret of spec.etcd.snapshots, so that what it reports survives the loss
// of the nodes it describes.
package etcdsnapshots

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
)

// Store is a cluster's folder in an S3-compatible bucket, reached over HTTPS with path-style
// requests.
type Store struct {
	// Endpoint is host[:port].
	Endpoint, Bucket string
	// Folder is <prefix>/<namespace>/<cluster>, without leading or trailing '/'.
	Folder string
	Region string
	// CABundle is PEM; empty trusts the system roots.
	CABundle []byte
	// AccessKeyID and SecretAccessKey sign the requests. They never appear in errors.
	AccessKeyID, SecretAccessKey string
}

// Object is an object of the folder.
type Object struct {
	Key          string
	Size         int64
	LastModified time.Time
}

// emptySHA256 is the SHA-256 of an empty body, the x-amz-content-sha256 of a GET.
var emptySHA256 = func() string { h := sha256.Sum256(nil); return hex.EncodeToString(h[:]) }()

// requestTimeout bounds each request: an unreachable store must not hold a reconcile worker.
const requestTimeout = 10 * time.Second

// maxPages bounds a listing (1,000 keys each): a cluster's folder holds a few dozen snapshots.
const maxPages = 20

type listResult struct {
	Contents []struct {
		Key          string    `xml:"Key"`
		Size         int64     `xml:"Size"`
		LastModified time.Time `xml:"LastModified"`
	} `xml:"Contents"`
	IsTruncated           bool   `xml:"IsTruncated"`
	NextContinuationToken string `xml:"NextContinuationToken"`
}

// List lists the objects of the folder (ListObjectsV2, every page).
func (s Store) List(ctx context.Context) ([]Object, error) {
	client, err := s.httpClient()
	if err != nil {
		return nil, err
	}
	var out []Object
	token := ""
	for range maxPages {
		q := url.Values{"list-type": {"2"}, "prefix": {s.Folder + "/"}}
		if token != "" {
			q.Set("continuation-token", token)
		}
		page, err := s.get(ctx, client, q)
		if err != nil {
			return nil, err
		}
		for _, c := range page.Contents {
			out = append(out, Object{Key: c.Key, Size: c.Size, LastModified: c.LastModified})
		}
		if !page.IsTruncated || page.NextContinuationToken == "" {
			return out, nil
		}
		token = page.NextContinuationToken
	}
	return nil, fmt.Errorf("listing s3://%s/%s/: more than %d pages", s.Bucket, s.Folder, maxPages)
}

func (s Store) httpClient() (*http.Client, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if len(s.CABundle) > 0 {
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(s.CABundle) {
			return nil, errors.New("caBundle holds no PEM certificate")
		}
		cfg.RootCAs = pool
	}
	return &http.Client{Timeout: requestTimeout, Transport: &http.Transport{TLSClientConfig: cfg, Proxy: http.ProxyFromEnvironment}}, nil
}

// listError says why a listing failed, in words that stay the same while the failure does: a
// network error names the store's endpoint, not the connection's own address, whose port
// changes with every attempt and would rewrite the conditions that quote the error (a status
// write per listing while a store is down).
func (s Store) listError(err error) error {
	var op *net.OpError
	if errors.As(err, &op) {
		return fmt.Errorf("listing s3://%s/%s/: %s https://%s: %v", s.Bucket, s.Folder, op.Op, s.Endpoint, op.Err)
	}
	return fmt.Errorf("listing s3://%s/%s/: %w", s.Bucket, s.Folder, err)
}

func (s Store) get(ctx context.Context, client *http.Client, q url.Values) (*listResult, error) {
	u := &url.URL{Scheme: "https", Host: s.Endpoint, Path: "/" + s.Bucket, RawQuery: q.Encode()}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("x-amz-content-sha256", emptySHA256)
	creds := aws.Credentials{AccessKeyID: s.AccessKeyID, SecretAccessKey: s.SecretAccessKey}
	if err := v4.NewSigner().SignHTTP(ctx, creds, req, emptySHA256, "s3", s.Region, time.Now()); err != nil {
		return nil, fmt.Errorf("signing the listing of s3://%s/%s/: %w", s.Bucket, s.Folder, err)
	}
	resp, err := client.Do(req)
	if err != nil {
		// url.Error repeats the URL (no credentials in it) and says what failed.
		return nil, s.listError(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return nil, s.listError(err)
	}
	if resp.StatusCode != http.StatusOK {
		var e struct {
			Code    string `xml:"Code"`
			Message string `xml:"Message"`
		}
		_ = xml.Unmarshal(body, &e)
		return nil, fmt.Errorf("listing s3://%s/%s/: %s %s %s", s.Bucket, s.Folder, resp.Status, e.Code, e.Message)
	}
	page := &listResult{}
	if err := xml.Unmarshal(body, page); err != nil {
		return nil, fmt.Errorf("listing s3://%s/%s/: the answer is not a ListObjectsV2 result: %w", s.Bucket, s.Folder, err)
	}
	return page, nil
}

// Kinds of snapshots, by the word their names start with (docs/backups.md, "Naming").
const (
	KindScheduled  = "scheduled"
	KindPreUpgrade = "pre-upgrade"
	KindOnDemand   = "on-demand"
)

// Snapshot is one member's snapshot in the store.
type Snapshot struct {
	// Node is the node that took it (the etcd member's node).
	Node string
	// Name is the object's name in the folder; Key its whole key.
	Name, Key string
	Kind      string
	// Time is when it was taken: the unix time that ends its name.
	Time time.Time
	Size int64
}

// Parse reads a snapshot of cluster from an object of its folder: <cluster>-<node>-<unix>
// (scheduled) or <kind>-<cluster>-<node>-<unix>, k0s' with .tar.gz. Anything else (k3s'
// .metadata objects, another cluster's snapshots, other files) is not one.
func Parse(cluster, folder string, o Object) (Snapshot, bool) {
	name, ok := strings.CutPrefix(o.Key, folder+"/")
	if !ok || name == "" || strings.Contains(name, "/") {
		return Snapshot{}, false
	}
	base := strings.TrimSuffix(name, ".tar.gz")
	kind, rest := KindScheduled, base
	for _, k := range []string{KindPreUpgrade, KindOnDemand} {
		if r, ok := strings.CutPrefix(base, k+"-"+cluster+"-"); ok {
			kind, rest = k, r
			break
		}
	}
	if kind == KindScheduled {
		if rest, ok = strings.CutPrefix(base, cluster+"-"); !ok {
			return Snapshot{}, false
		}
	}
	i := strings.LastIndexByte(rest, '-')
	t, ok := TimeOf(rest)
	if i <= 0 || !ok {
		return Snapshot{}, false
	}
	return Snapshot{Node: rest[:i], Name: name, Key: o.Key, Kind: kind, Time: t, Size: o.Size}, true
}

// TimeOf is when a snapshot was taken: the unix time that ends its name, before k0s' .tar.gz.
func TimeOf(name string) (time.Time, bool) {
	base := strings.TrimSuffix(name, ".tar.gz")
	i := strings.LastIndexByte(base, '-')
	if i < 0 {
		return time.Time{}, false
	}
	sec, err := strconv.ParseInt(base[i+1:], 10, 64)
	if err != nil || sec <= 0 {
		return time.Time{}, false
	}
	return time.Unix(sec, 0).UTC(), true
}

// Newest returns the newest snapshot of each node among the objects that are snapshots of
// cluster, whatever their kind.
func Newest(cluster, folder string, objects []Object) map[string]Snapshot {
	out := map[string]Snapshot{}
	for _, o := range objects {
		s, ok := Parse(cluster, folder, o)
		if !ok {
			continue
		}
		if cur, ok := out[s.Node]; !ok || s.Time.After(cur.Time) || s.Time.Equal(cur.Time) && s.Name > cur.Name {
			out[s.Node] = s
		}
	}
	return out
}

// Nodes lists the nodes of a Newest result, sorted.
func Nodes(newest map[string]Snapshot) []string {
	nodes := make([]string, 0, len(newest))
	for n := range newest {
		nodes = append(nodes, n)
	}
	sort.Strings(nodes)
	return nodes
}
