//go:build !linux && !darwin && !freebsd && !netbsd && !openbsd && !dragonfly

package main

// isTTY is false where the terminal driver is not asked: no progress line there.
func isTTY(uintptr) bool { return false }
