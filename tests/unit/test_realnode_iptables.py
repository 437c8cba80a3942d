"""How the rig names the iptables rules it removes: the kubelet's rules carry quoted comments with spaces, and
a rule left by a kubelet or kube-proxy is told from the host's own by its chain or its jump."""

from __future__ import annotations

import realnode

KUBELET_DROP = ('-A KUBE-FIREWALL ! -s 127.0.0.0/8 -d 127.0.0.0/8 -m comment --comment "block incoming localnet '
                'connections" -m conntrack ! --ctstate RELATED,ESTABLISHED,DNAT -j DROP')


def test_a_quoted_comment_stays_one_argument():
    args = realnode.rule_args(KUBELET_DROP)
    assert args[0] == "KUBE-FIREWALL"
    assert args[args.index("--comment") + 1] == "block incoming localnet connections"
    assert args[-2:] == ["-j", "DROP"]


def test_rules_in_or_jumping_to_kube_chains_are_the_kubelets_or_kube_proxys():
    assert realnode.kube_rule(KUBELET_DROP)
    assert realnode.kube_rule('-A FORWARD -m comment --comment "kubernetes forwarding rules" -j KUBE-FORWARD')
    assert realnode.kube_rule("-A INPUT -j KUBE-FIREWALL")
    assert not realnode.kube_rule("-A INPUT -p tcp --dport 22 -j ACCEPT")
    assert not realnode.kube_rule('-A POSTROUTING -s 10.0.0.0/8 -m comment --comment "KUBE- in a comment" -j '
                                  'MASQUERADE')
    assert not realnode.kube_rule("-A DOCKER-USER -j RETURN")


def test_leftovers_are_left_alone_while_any_kubernetes_node_process_runs():
    for running in ("kubelet", "kube-proxy", "kubelite", "k3s-server", "k3s-agent", "k0s", "rke2"):
        assert realnode.owns_kube_chains(running), running
    for other in ("containerd", "kube-apiserver", "kube-scheduler", "etcd", "python3"):
        assert not realnode.owns_kube_chains(other), other
