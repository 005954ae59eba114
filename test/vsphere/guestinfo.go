package vsphere

import (
	"bytes"
	"compress/gzip"
	"encoding/base64"
	"fmt"
	"io"
	"strings"

	"github.com/vmware/govmomi/vim25/types"
)

// The guestinfo keys CAPV writes and Kairos reads (CAPV/pkg/services/govmomi/extra/config.go;
// YIP/pkg/plugins/datasourceProviders/provider_vmware.go guestMetaData, guestUserData).
const (
	guestinfoUserData = "guestinfo.userdata"
	guestinfoMetaData = "guestinfo.metadata"
	encodingSuffix    = ".encoding"
)

// Where yip's datasource plugin puts what the VMware provider extracts
// (YIP/pkg/plugins/datasourceProviders/provider.go ConfigPath, provider_vmware.go Extract
// writes "metadata"; YIP/pkg/plugins/datasource.go processUserData writes the user data as
// userdata.yaml unless the config names another file).
const (
	MetadataPath = "/run/config/metadata"
	UserDataPath = "/run/config/userdata.yaml"
)

// extraConfig returns a VM's extraConfig as a map of strings.
func extraConfig(values []types.BaseOptionValue) map[string]string {
	out := map[string]string{}
	for _, o := range values {
		if ov := o.GetOptionValue(); ov != nil {
			if s, ok := ov.Value.(string); ok {
				out[ov.Key] = s
			}
		}
	}
	return out
}

// decodeGuestinfo reads one guestinfo key as Kairos' VMware datasource does
// (YIP/pkg/plugins/datasourceProviders/provider_vmware.go vmwareGet): the key's ".encoding"
// key, with a trailing newline trimmed, says how: " " (one space) is the data as it is
// (trailing newline trimmed), "base64", "gzip+base64"; anything else, an absent or empty
// encoding included, is "Unknown encoding" and yields no data. vmwareGet reads an absent key as
// the empty string, which is what it then decodes.
func decodeGuestinfo(extra map[string]string, key string) ([]byte, error) {
	value := extra[key]
	encoding, ok := extra[key+encodingSuffix]
	switch enc := strings.TrimSuffix(encoding, "\n"); enc {
	case " ":
		return []byte(strings.TrimSuffix(value, "\n")), nil
	case "base64":
		data, err := io.ReadAll(base64.NewDecoder(base64.StdEncoding, strings.NewReader(value)))
		if err != nil {
			return nil, fmt.Errorf("%s is not valid base64 (%s=base64): %w", key, key+encodingSuffix, err)
		}
		return data, nil
	case "gzip+base64":
		zr, err := gzip.NewReader(base64.NewDecoder(base64.StdEncoding, strings.NewReader(value)))
		if err != nil {
			return nil, fmt.Errorf("%s is not gzip in base64 (%s=gzip+base64): %w", key, key+encodingSuffix, err)
		}
		data, err := io.ReadAll(zr)
		if err != nil {
			return nil, fmt.Errorf("%s is not gzip in base64 (%s=gzip+base64): %w", key, key+encodingSuffix, err)
		}
		return data, nil
	default:
		if !ok {
			why := ""
			if _, ignition := extra["guestinfo.ignition.config.data"]; ignition && key == guestinfoUserData {
				// CAPV/pkg/services/govmomi/extra/config.go SetIgnitionUserData.
				why = " (CAPV wrote the bootstrap data to guestinfo.ignition.config.data: the bootstrap Secret's format is ignition, which Kairos does not read)"
			}
			return nil, fmt.Errorf("%s has no %s key%s: Kairos' VMware datasource decodes only the encodings \" \", base64 and gzip+base64 and reads an absent one as unknown", key, key+encodingSuffix, why)
		}
		return nil, fmt.Errorf("%s%s is %q: Kairos' VMware datasource decodes only \" \", base64 and gzip+base64", key, encodingSuffix, enc)
	}
}

// guestData is what a Kairos VM's datasource finds in its guestinfo.
type guestData struct {
	userData []byte
	// metadata is nil when the VM has none or it does not decode: yip logs that and goes on
	// without writing /run/config/metadata (provider_vmware.go Extract).
	metadata    []byte
	metadataErr error
}

// readGuestData decodes a VM's guestinfo as Kairos' VMware datasource does. User data that does
// not decode is an error: yip's provider then returns no user data (provider_vmware.go Extract:
// "This is not an error"), so the VM boots Kairos without any cloud-config, never starts a
// Kubernetes distribution, and never becomes a node. Empty user data and "---" are no data at
// all to yip's Probe either.
func readGuestData(extra map[string]string) (*guestData, error) {
	userData, err := decodeGuestinfo(extra, guestinfoUserData)
	if err != nil {
		return nil, err
	}
	if d := bytes.TrimSpace(userData); len(d) <= 1 || string(d) == "---" {
		return nil, fmt.Errorf("%s is empty: the VM has no user data (CAPV writes it only for a bootstrap Secret whose format is cloud-config or absent)", guestinfoUserData)
	}
	g := &guestData{userData: userData}
	if _, ok := extra[guestinfoMetaData]; ok {
		g.metadata, g.metadataErr = decodeGuestinfo(extra, guestinfoMetaData)
	} else {
		g.metadataErr = fmt.Errorf("the VM has no %s", guestinfoMetaData)
	}
	return g, nil
}
