// Package controlplane will hold the Kairos control-plane provider.
package controlplane
