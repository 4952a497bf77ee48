//go:build !linux

package e2e

import "syscall"

// diesWithParent: only Linux can tie a child's life to its parent's.
func diesWithParent() *syscall.SysProcAttr { return nil }
