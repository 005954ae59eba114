package yamlenc

import (
	"strings"
	"testing"
)

func BenchmarkLiteralOK(b *testing.B) {
	line := strings.Repeat("MIIEowIBAAKCAQEA+zfdatuW9CmpVrJVv0e/bkaPHMUSpg/rKwO5WxDM+1TLkA4b", 1)
	s := "-----BEGIN RSA PRIVATE KEY-----\n" + strings.Repeat(line+"\n", 25) + "-----END RSA PRIVATE KEY-----\n"
	b.SetBytes(int64(len(s)))
	for b.Loop() {
		if ok, _ := literalOK(s); !ok {
			b.Fatal("not ok")
		}
	}
}
