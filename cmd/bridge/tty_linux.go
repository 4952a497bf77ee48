package main

import (
	"syscall"
	"unsafe"
)

// isTTY asks the terminal driver for fd's settings: only a terminal has them.
func isTTY(fd uintptr) bool {
	var t syscall.Termios
	_, _, errno := syscall.Syscall(syscall.SYS_IOCTL, fd, syscall.TCGETS, uintptr(unsafe.Pointer(&t)))
	return errno == 0
}
