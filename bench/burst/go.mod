module kube-fault-proxy/bench/burst

go 1.24

require (
	k8s.io/api v0.35.5
	k8s.io/apimachinery v0.35.5
	k8s.io/client-go v0.35.5
)
