// CoreDNS with the four plugins the real node's Corefile uses (hack/realnode.py), the way
// CoreDNS documents building it from outside its tree: its own cmd links every plugin it
// ships (clouds, etcd, ...), which took 217 s of a cold build on 2 cores for nothing used.
package main

import (
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/coremain"

	_ "github.com/coredns/coredns/plugin/bind"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/template"
)

// In the order of CoreDNS's plugin.cfg, which is the order a query passes them.
func init() {
	dnsserver.Directives = []string{"bind", "errors", "template", "kubernetes"}
}

func main() {
	coremain.Run()
}
