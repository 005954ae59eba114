package webhooks

// Failing test for a product bug; not part of the delivered suite. Copy into
// bootstrap/internal/webhooks/ to reproduce.

import (
	"bytes"
	"context"
	"encoding/base64"
	"strings"
	"testing"

	"k8s.io/utils/ptr"
)

// TestSSHKeyWithTrailingNewlineIsAdmitted: spec.sshPublicKey validation explicitly tolerates a
// trailing newline (what `sshPublicKey: |` or `$(cat id.pub)` produce), but the dry render then
// rejects the object with a renderer-internal message.
func TestSSHKeyWithTrailingNewlineIsAdmitted(t *testing.T) {
	spec := worker("k0s")
	spec.SSHPublicKey = "ssh-ed25519 " + base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{9}, 51)) + " me@host\n"
	if _, err := (&KairosConfig{}).ValidateCreate(context.Background(), kairosConfig(spec)); err != nil {
		t.Fatalf("a valid key with a trailing newline is rejected: %v", err)
	}
}

// TestImmutableMessageNamesTheSecret: with status.initialization.dataSecretCreated true but no
// (deprecated) status.dataSecretName, the immutability message reads "(Secret )".
func TestImmutableMessageNamesTheSecret(t *testing.T) {
	old := kairosConfig(controlPlane("k0s"))
	old.Status.Initialization.DataSecretCreated = ptr.To(true)
	changed := controlPlane("k0s")
	changed.PreCommands = []string{"echo changed"}
	_, err := (&KairosConfig{}).ValidateUpdate(context.Background(), old, kairosConfig(changed))
	if err == nil || strings.Contains(err.Error(), "(Secret )") {
		t.Fatalf("error = %v, want one naming the data Secret", err)
	}
}
