"""How the rig puts the host's iptables back (hack/host_record.py): the kubelet's rules carry quoted comments with
spaces; a rule left by a kubelet or kube-proxy is told from the host's own by its chain or its jump; the teardown
removes what was made since the record, rules before chains, and nothing the host had."""

from __future__ import annotations

import host_record

KUBELET_DROP = ('-A KUBE-FIREWALL ! -s 127.0.0.0/8 -d 127.0.0.0/8 -m comment --comment "block incoming localnet '
                'connections" -m conntrack ! --ctstate RELATED,ESTABLISHED,DNAT -j DROP')


def test_a_quoted_comment_stays_one_argument():
    args = host_record.rule_args(KUBELET_DROP)
    assert args[0] == "KUBE-FIREWALL"
    assert args[args.index("--comment") + 1] == "block incoming localnet connections"
    assert args[-2:] == ["-j", "DROP"]


def test_rules_in_or_jumping_to_kube_chains_are_the_kubelets_or_kube_proxys():
    assert host_record.kube_rule(KUBELET_DROP)
    assert host_record.kube_rule('-A FORWARD -m comment --comment "kubernetes forwarding rules" -j KUBE-FORWARD')
    assert host_record.kube_rule("-A INPUT -j KUBE-FIREWALL")
    assert host_record.kube_rule("-A PREROUTING -g KUBE-SERVICES")
    assert not host_record.kube_rule("-A INPUT -p tcp --dport 22 -j ACCEPT")
    assert not host_record.kube_rule('-A POSTROUTING -s 10.0.0.0/8 -m comment --comment "KUBE- in a comment" -j '
                                  'MASQUERADE')
    assert not host_record.kube_rule("-A DOCKER-USER -j RETURN")


def test_leftovers_are_left_alone_while_any_kubernetes_node_process_runs():
    for running in ("kubelet", "kube-proxy", "kubelite", "k3s-server", "k3s-agent", "k0s", "rke2"):
        assert host_record.owns_kube_chains(running), running
    for other in ("containerd", "kube-apiserver", "kube-scheduler", "etcd", "python3"):
        assert not host_record.owns_kube_chains(other), other


# An iptables-save of a host with its own chain and rule (HOST-IN), and what a kubelet, kube-proxy and the CNI
# bridge plugin added since: chains (one, CNI-1, not a KUBE-* chain), rules in them and jumps to them.
SAVED = [
    ("filter", ":INPUT ACCEPT"), ("filter", ":FORWARD DROP"), ("filter", ":HOST-IN -"),
    ("filter", ":KUBE-FIREWALL -"), ("filter", "-A INPUT -j HOST-IN"), ("filter", "-A INPUT -j KUBE-FIREWALL"),
    ("filter", "-A HOST-IN -p tcp --dport 22 -j ACCEPT"), ("filter", KUBELET_DROP),
    ("nat", ":POSTROUTING ACCEPT"), ("nat", ":CNI-1 -"), ("nat", ":KUBE-POSTROUTING -"),
    ("nat", "-A POSTROUTING -s 10.88.0.0/24 -j CNI-1"), ("nat", "-A POSTROUTING -j KUBE-POSTROUTING"),
    ("nat", "-A CNI-1 -j MASQUERADE"),
]
RECORD = ["*filter", ":INPUT ACCEPT", ":FORWARD DROP", ":HOST-IN -", "-A INPUT -j HOST-IN",
          "-A HOST-IN -p tcp --dport 22 -j ACCEPT", "COMMIT", "*nat", ":POSTROUTING ACCEPT", "COMMIT"]


def test_the_teardown_removes_every_rule_and_chain_made_since_the_record_and_nothing_else():
    rules, chains = host_record.undo(SAVED, RECORD)
    assert [line for _, line in rules] == ["-A INPUT -j KUBE-FIREWALL", KUBELET_DROP,
                                           "-A POSTROUTING -s 10.88.0.0/24 -j CNI-1",
                                           "-A POSTROUTING -j KUBE-POSTROUTING", "-A CNI-1 -j MASQUERADE"]
    assert chains == [("filter", "KUBE-FIREWALL"), ("nat", "CNI-1"), ("nat", "KUBE-POSTROUTING")]
    after = [(t, line) for t, line in SAVED
             if (t, line) not in rules and (t, host_record.user_chain(line)) not in chains]
    assert host_record.undo(after, RECORD) == ([], [])  # the host as recorded: nothing more to remove


def test_a_killed_rigs_leftovers_are_the_kube_rules_and_chains_only():
    rules, chains = host_record.leftovers(SAVED)
    assert [line for _, line in rules] == ["-A INPUT -j KUBE-FIREWALL", KUBELET_DROP,
                                           "-A POSTROUTING -j KUBE-POSTROUTING"]
    assert chains == [("filter", "KUBE-FIREWALL"), ("nat", "KUBE-POSTROUTING")]


def test_built_in_chains_are_never_deleted():
    assert host_record.user_chain(":INPUT ACCEPT") is None
    assert host_record.user_chain(":KUBE-FIREWALL -") == "KUBE-FIREWALL"
    assert host_record.user_chain("-A INPUT -j ACCEPT") is None


def test_the_check_names_what_changed():
    before = {"sysctls": {"net.ipv4.ip_forward": "0"}, "links": ["eth0", "lo"], "dirs": []}
    after = {"sysctls": {"net.ipv4.ip_forward": "1"}, "links": ["eth0", "lo", "railyard0"], "dirs": []}
    assert host_record.changes(before, after) == ["sysctls: {'net.ipv4.ip_forward': '0'} -> "
                                                  "{'net.ipv4.ip_forward': '1'}",
                                                  "links: added ['railyard0'], removed []"]
    assert host_record.changes(before, before) == []
