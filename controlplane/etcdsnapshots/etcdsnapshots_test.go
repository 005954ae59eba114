package etcdsnapshots

import (
	"context"
	"encoding/pem"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"
)

func TestParse(t *testing.T) {
	const folder = "edge/default/site-a"
	for key, want := range map[string]string{
		folder + "/site-a-site-a-cp-x7k2p-1764403200":                    "scheduled site-a-cp-x7k2p 2025-11-29T08:00:00Z",
		folder + "/site-a-site-a-cp-x7k2p-1764403200.tar.gz":             "scheduled site-a-cp-x7k2p 2025-11-29T08:00:00Z",
		folder + "/pre-upgrade-site-a-site-a-cp-x7k2p-1764403300.tar.gz": "pre-upgrade site-a-cp-x7k2p 2025-11-29T08:01:40Z",
		folder + "/on-demand-site-a-node-1-1764403400":                   "on-demand node-1 2025-11-29T08:03:20Z",
		// Not snapshots of site-a: k3s' metadata, another cluster, other files, no time.
		folder + "/.metadata/site-a-site-a-cp-x7k2p-1764403200": "",
		folder + "/site-b-site-b-cp-aaaaa-1764403200":           "",
		folder + "/site-a-1764403200":                           "",
		folder + "/site-a-node-latest":                          "",
		"other/site-a-node-1764403200":                          "",
		folder + "/":                                            "",
	} {
		s, ok := Parse("site-a", folder, Object{Key: key, Size: 7})
		got := ""
		if ok {
			got = fmt.Sprintf("%s %s %s", s.Kind, s.Node, s.Time.Format(time.RFC3339))
			if s.Key != key || s.Size != 7 || !strings.HasSuffix(key, "/"+s.Name) {
				t.Errorf("%s: %+v", key, s)
			}
		}
		if got != want {
			t.Errorf("Parse(%q) = %q, want %q", key, got, want)
		}
	}
}

// Newest keeps each node's newest snapshot, whatever its kind.
func TestNewest(t *testing.T) {
	const folder = "f"
	objs := []Object{
		{Key: "f/c-n1-100"}, {Key: "f/pre-upgrade-c-n1-300"}, {Key: "f/c-n1-200"},
		{Key: "f/c-n2-50.tar.gz"}, {Key: "f/.metadata/c-n2-900"}, {Key: "f/d-n3-999"},
	}
	newest := Newest("c", folder, objs)
	if got := strings.Join(Nodes(newest), ","); got != "n1,n2" {
		t.Fatalf("nodes %s", got)
	}
	if newest["n1"].Name != "pre-upgrade-c-n1-300" || newest["n2"].Name != "c-n2-50.tar.gz" {
		t.Errorf("newest %+v", newest)
	}
}

// List follows ListObjectsV2's continuation, signs every request for the store's region and
// service (the verifier itself is test/objectstore's, against the real store), trusts only the
// caBundle, and says what failed without the credentials.
func TestListPages(t *testing.T) {
	var queries []url.Values
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		queries = append(queries, r.URL.Query())
		auth := r.Header.Get("Authorization")
		if !strings.Contains(auth, "Credential=AKIAEXAMPLE/") || !strings.Contains(auth, "/eu-west-1/s3/aws4_request") || r.Header.Get("X-Amz-Content-Sha256") != emptySHA256 {
			w.WriteHeader(http.StatusForbidden)
			fmt.Fprint(w, `<Error><Code>AccessDenied</Code><Message>bad signature</Message></Error>`)
			return
		}
		if r.URL.Query().Get("continuation-token") == "" {
			fmt.Fprint(w, `<ListBucketResult><Contents><Key>f/c-n1-100</Key><Size>5</Size><LastModified>2025-11-29T08:00:00Z</LastModified></Contents><IsTruncated>true</IsTruncated><NextContinuationToken>page 2</NextContinuationToken></ListBucketResult>`)
			return
		}
		fmt.Fprint(w, `<ListBucketResult><Contents><Key>f/c-n1-200</Key><Size>6</Size></Contents><IsTruncated>false</IsTruncated></ListBucketResult>`)
	}))
	defer srv.Close()
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	u, _ := url.Parse(srv.URL)
	s := Store{Endpoint: u.Host, Bucket: "b", Folder: "f", Region: "eu-west-1", CABundle: ca, AccessKeyID: "AKIAEXAMPLE", SecretAccessKey: "never-shown"}
	objs, err := s.List(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(objs) != 2 || objs[0].Key != "f/c-n1-100" || objs[0].Size != 5 || objs[1].Key != "f/c-n1-200" {
		t.Errorf("objects %+v", objs)
	}
	if len(queries) != 2 || queries[0].Get("prefix") != "f/" || queries[0].Get("list-type") != "2" || queries[1].Get("continuation-token") != "page 2" {
		t.Errorf("queries %v", queries)
	}

	s.Region = "us-east-1"
	if _, err := s.List(context.Background()); err == nil || !strings.Contains(err.Error(), "403 Forbidden AccessDenied bad signature") || strings.Contains(err.Error(), "never-shown") {
		t.Errorf("refused listing: %v", err)
	}
	s.CABundle = nil // the test server's CA is not among the system roots
	if _, err := s.List(context.Background()); err == nil || !strings.Contains(err.Error(), "listing s3://b/f/") || !strings.Contains(err.Error(), "certificate") {
		t.Errorf("untrusted store: %v", err)
	}
}

func TestTimeOf(t *testing.T) {
	for name, want := range map[string]string{
		"site-a-site-a-cp-x7k2p-1764403200":                    "2025-11-29T08:00:00Z",
		"pre-upgrade-site-a-site-a-cp-x7k2p-1764403300.tar.gz": "2025-11-29T08:01:40Z",
		"no-time": "",
		"notime":  "",
	} {
		got, ok := TimeOf(name)
		if ok != (want != "") || ok && got.Format(time.RFC3339) != want {
			t.Errorf("TimeOf(%q) = %v %v, want %q", name, got, ok, want)
		}
	}
}

// A store that resets every connection fails every listing with the same words: the error names
// the store, never the connection's own port, so the conditions quoting it do not change (and
// are not written again) with every attempt while the store is down.
func TestListErrorIsStable(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			_ = c.(*net.TCPConn).SetLinger(0) // closing sends a reset
			buf := make([]byte, 1)
			_, _ = c.Read(buf) // the client's first bytes (its TLS hello)
			_ = c.Close()
		}
	}()
	s := Store{Endpoint: l.Addr().String(), Bucket: "b", Folder: "f", Region: "us-east-1", AccessKeyID: "AKIAEXAMPLE", SecretAccessKey: "secret"}
	var msgs []string
	for range 3 {
		_, err := s.List(context.Background())
		if err == nil {
			t.Fatal("a listing of a store that resets its connections succeeded")
		}
		msgs = append(msgs, err.Error())
	}
	if msgs[0] != msgs[1] || msgs[1] != msgs[2] || !strings.Contains(msgs[0], "https://"+s.Endpoint) {
		t.Errorf("the listing errors differ or do not name the store:\n%s", strings.Join(msgs, "\n"))
	}
	t.Log(msgs[0])
}
