//go:build !linux

package main

// guard is Linux-only (child subreapers): elsewhere the sandbox runs unguarded in this process.
func guard() (code int, guarded bool) { return 0, false }
