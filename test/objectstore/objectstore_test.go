package objectstore

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"encoding/xml"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
)

// do sends one S3 request signed by the AWS SDK's own Signature Version 4 signer (an
// implementation independent of the store's verifier), and returns the status and body.
func do(t *testing.T, c *http.Client, s *Store, keyID, secret, method, path string, body []byte, hashHeader string) (int, []byte, error) {
	t.Helper()
	req, err := http.NewRequest(method, s.URL+path, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(body)
	hash := hex.EncodeToString(sum[:])
	if hashHeader == "" {
		hashHeader = hash
	}
	req.Header.Set("X-Amz-Content-Sha256", hashHeader)
	if keyID != "" {
		creds := aws.Credentials{AccessKeyID: keyID, SecretAccessKey: secret}
		signHash := hashHeader
		if err := v4.NewSigner().SignHTTP(context.Background(), creds, req, signHash, "s3", s.Region, time.Now()); err != nil {
			t.Fatal(err)
		}
	}
	resp, err := c.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, out, nil
}

func errorCode(body []byte) string {
	var e struct{ Code string }
	_ = xml.Unmarshal(body, &e)
	return e.Code
}

// Put, get and list through the S3 protocol over TLS with the store's CA and keys.
func TestPutGetList(t *testing.T) {
	s := Start(t, Options{Buckets: []string{"site-backups"}, Region: "eu-west-1"})
	c := s.Client()
	data := []byte("etcd snapshot bytes \x00\x01\x02")
	key := "/site-backups/edge/default/demo/demo-node-1764403200.tar.gz"

	if code, body, err := do(t, c, s, s.AccessKeyID, s.SecretAccessKey, http.MethodPut, key, data, ""); err != nil || code != http.StatusOK {
		t.Fatalf("put: %d %s %v", code, body, err)
	}
	code, body, err := do(t, c, s, s.AccessKeyID, s.SecretAccessKey, http.MethodGet, key, nil, "")
	if err != nil || code != http.StatusOK || !bytes.Equal(body, data) {
		t.Fatalf("get: %d %q %v", code, body, err)
	}
	// ListObjectsV2 with a prefix that needs encoding ('/'), as the k0s script lists.
	code, body, err = do(t, c, s, s.AccessKeyID, s.SecretAccessKey, http.MethodGet, "/site-backups?list-type=2&prefix=edge%2Fdefault%2Fdemo%2Fdemo-node-", nil, "")
	if err != nil || code != http.StatusOK {
		t.Fatalf("list: %d %s %v", code, body, err)
	}
	var list struct {
		Contents []struct {
			Key  string
			Size int64
		}
	}
	if err := xml.Unmarshal(body, &list); err != nil {
		t.Fatal(err)
	}
	if len(list.Contents) != 1 || list.Contents[0].Key != strings.TrimPrefix(key, "/site-backups/") || list.Contents[0].Size != int64(len(data)) {
		t.Fatalf("list: %+v", list.Contents)
	}
	if s.Refused() != 0 {
		t.Errorf("%d requests refused", s.Refused())
	}
}

// Requests that are not signed with the store's keys, or whose body is not what they signed,
// are refused before they reach the store: nothing is written.
func TestRefusals(t *testing.T) {
	s := Start(t, Options{})
	c := s.Client()
	data := []byte("snapshot")
	for name, tc := range map[string]struct {
		keyID, secret, hash string
		body                []byte
		want                string
	}{
		"wrong secret":     {s.AccessKeyID, s.SecretAccessKey + "x", "", data, "SignatureDoesNotMatch"},
		"unknown key":      {"AKIAUNKNOWN", s.SecretAccessKey, "", data, "InvalidAccessKeyId"},
		"anonymous":        {"", "", "", data, "AccessDenied"},
		"tampered body":    {s.AccessKeyID, s.SecretAccessKey, strings.Repeat("0", 64), data, "XAmzContentSHA256Mismatch"},
		"aws-chunked body": {s.AccessKeyID, s.SecretAccessKey, "STREAMING-AWS4-HMAC-SHA256-PAYLOAD", data, "NotImplemented"},
	} {
		t.Run(name, func(t *testing.T) {
			code, body, err := do(t, c, s, tc.keyID, tc.secret, http.MethodPut, "/snapshots/"+strings.ReplaceAll(name, " ", "-"), tc.body, tc.hash)
			if err != nil || code < 400 || errorCode(body) != tc.want {
				t.Fatalf("got %d %s %v, want %s", code, body, err, tc.want)
			}
		})
	}
	// A GET with the wrong secret is refused too, not only writes.
	if code, body, _ := do(t, c, s, s.AccessKeyID, "wrong", http.MethodGet, "/snapshots?list-type=2", nil, ""); code != http.StatusForbidden || errorCode(body) != "SignatureDoesNotMatch" {
		t.Errorf("list with a wrong secret: %d %s", code, body)
	}
	if keys, err := s.Keys("snapshots"); err != nil || len(keys) != 0 {
		t.Errorf("refused requests stored objects: %v %v", keys, err)
	}
	// The same request with the right keys goes through: the refusals were the keys'.
	if code, body, _ := do(t, c, s, s.AccessKeyID, s.SecretAccessKey, http.MethodPut, "/snapshots/ok", data, ""); code != http.StatusOK {
		t.Errorf("signed put: %d %s", code, body)
	}
}

// A client that does not trust the store's CA cannot talk to it: the store is TLS only, with a
// certificate of its own CA.
func TestUntrustedTLS(t *testing.T) {
	s := Start(t, Options{})
	for name, c := range map[string]*http.Client{
		"system roots": {Transport: &http.Transport{TLSClientConfig: &tls.Config{MinVersion: tls.VersionTLS12}}},
		"plain http":   http.DefaultClient,
	} {
		t.Run(name, func(t *testing.T) {
			url := s.URL
			if name == "plain http" {
				url = "http://" + s.Endpoint
			}
			req, _ := http.NewRequest(http.MethodGet, url+"/snapshots", nil)
			resp, err := c.Do(req)
			if name == "plain http" {
				// Go's TLS server answers plain HTTP with 400 and never reaches the store.
				if err == nil {
					defer resp.Body.Close()
					if resp.StatusCode != http.StatusBadRequest {
						t.Errorf("plain HTTP: %d", resp.StatusCode)
					}
				}
				return
			}
			var unknown interface{ Error() string }
			if err == nil || !errors.As(err, &unknown) || !strings.Contains(err.Error(), "certificate signed by unknown authority") {
				t.Fatalf("got %v, want an untrusted certificate", err)
			}
		})
	}
}

// An unreachable store answers nothing, not even on a connection a client kept open; it comes
// back at the same endpoint with what it held.
func TestUnreachable(t *testing.T) {
	s := Start(t, Options{})
	c := s.Client() // keeps its connection alive between requests
	if code, body, err := do(t, c, s, s.AccessKeyID, s.SecretAccessKey, http.MethodPut, "/snapshots/kept", []byte("x"), ""); err != nil || code != http.StatusOK {
		t.Fatalf("put: %d %s %v", code, body, err)
	}
	s.SetUnreachable(true)
	for _, client := range []*http.Client{c, s.Client()} {
		if code, body, err := do(t, client, s, s.AccessKeyID, s.SecretAccessKey, http.MethodGet, "/snapshots?list-type=2", nil, ""); err == nil {
			t.Fatalf("an unreachable store answered: %d %s", code, body)
		}
	}
	if code, _, err := do(t, c, s, s.AccessKeyID, s.SecretAccessKey, http.MethodPut, "/snapshots/lost", []byte("y"), ""); err == nil {
		t.Fatalf("an unreachable store took a write: %d", code)
	}
	s.SetUnreachable(false)
	code, body, err := do(t, c, s, s.AccessKeyID, s.SecretAccessKey, http.MethodGet, "/snapshots/kept", nil, "")
	if err != nil || code != http.StatusOK || string(body) != "x" {
		t.Fatalf("back: %d %q %v", code, body, err)
	}
	if keys, err := s.Keys("snapshots"); err != nil || len(keys) != 1 {
		t.Errorf("keys %v %v, want only the one written while reachable", keys, err)
	}
}
