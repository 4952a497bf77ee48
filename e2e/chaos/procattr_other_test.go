//go:build !linux

package chaos

import "syscall"

// diesWithParent: only Linux can tie a child's life to its parent's; elsewhere the test's
// cleanups stop the bridge.
func diesWithParent() *syscall.SysProcAttr { return nil }
