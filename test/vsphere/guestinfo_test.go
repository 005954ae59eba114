package vsphere

import (
	"bytes"
	"compress/gzip"
	"encoding/base64"
	"strings"
	"testing"
)

// TestGuestinfoDecoding: the guest reads guestinfo as Kairos' VMware datasource does
// (YIP/pkg/plugins/datasourceProviders/provider_vmware.go vmwareGet) and refuses, with a reason
// naming the key, what that datasource cannot decode.
func TestGuestinfoDecoding(t *testing.T) {
	const doc = "#cloud-config\nhostname: cp-0\n"
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	_, _ = zw.Write([]byte(doc))
	_ = zw.Close()
	b64 := base64.StdEncoding.EncodeToString([]byte(doc))
	for _, tc := range []struct {
		name    string
		extra   map[string]string
		want    string
		refused string
	}{
		{name: "base64, as CAPV writes it", extra: map[string]string{"guestinfo.userdata": b64, "guestinfo.userdata.encoding": "base64"}, want: doc},
		{name: "gzip+base64", extra: map[string]string{"guestinfo.userdata": base64.StdEncoding.EncodeToString(gz.Bytes()), "guestinfo.userdata.encoding": "gzip+base64\n"}, want: doc},
		{name: "plain, encoding one space", extra: map[string]string{"guestinfo.userdata": doc, "guestinfo.userdata.encoding": " "}, want: strings.TrimSuffix(doc, "\n")},
		{name: "no encoding key", extra: map[string]string{"guestinfo.userdata": doc}, refused: "has no guestinfo.userdata.encoding key"},
		{name: "empty encoding", extra: map[string]string{"guestinfo.userdata": doc, "guestinfo.userdata.encoding": ""}, refused: `guestinfo.userdata.encoding is ""`},
		{name: "unknown encoding", extra: map[string]string{"guestinfo.userdata": b64, "guestinfo.userdata.encoding": "b64"}, refused: `guestinfo.userdata.encoding is "b64"`},
		{name: "not base64", extra: map[string]string{"guestinfo.userdata": doc, "guestinfo.userdata.encoding": "base64"}, refused: "is not valid base64"},
		{name: "not gzip", extra: map[string]string{"guestinfo.userdata": b64, "guestinfo.userdata.encoding": "gzip+base64"}, refused: "is not gzip in base64"},
		{name: "no user data (ignition)", extra: map[string]string{"guestinfo.ignition.config.data": b64, "guestinfo.ignition.config.data.encoding": "base64"}, refused: "has no guestinfo.userdata.encoding key"},
		{name: "empty document", extra: map[string]string{"guestinfo.userdata": base64.StdEncoding.EncodeToString([]byte("---\n")), "guestinfo.userdata.encoding": "base64"}, refused: "is empty"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g, err := readGuestData(tc.extra)
			if tc.refused != "" {
				if err == nil || !strings.Contains(err.Error(), tc.refused) {
					t.Fatalf("error %v, want one containing %q", err, tc.refused)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if string(g.userData) != tc.want {
				t.Errorf("user data %q, want %q", g.userData, tc.want)
			}
			if g.metadataErr == nil {
				t.Errorf("no guestinfo.metadata, yet no metadata error")
			}
		})
	}
}
