//go:build !linux

package drill

import "syscall"

func childAttr() *syscall.SysProcAttr { return nil }
