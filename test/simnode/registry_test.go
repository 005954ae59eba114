package simnode_test

import (
	"testing"

	"github.com/kairos-capi/kairos-capi/test/simnode"
)

// TestAddressPrefix: a registry takes the first two octets of its nodes' addresses and refuses
// anything else, so that a typo does not silently hand out addresses of another range.
func TestAddressPrefix(t *testing.T) {
	t.Parallel()
	for prefix, ok := range map[string]bool{"198.19": true, "127.9": true, "198.19.0": false, "198": false, "abc.def": false, "300.1": false} {
		reg, err := simnode.NewRegistry(simnode.Options{AddressPrefix: prefix, AssetsDir: t.TempDir(), Dir: t.TempDir()})
		if (err == nil) != ok {
			t.Errorf("AddressPrefix %q: error %v, want ok=%v", prefix, err, ok)
		}
		if reg != nil {
			reg.Close()
		}
	}
}
