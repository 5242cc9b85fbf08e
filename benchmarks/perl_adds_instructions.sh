#!/bin/sh
# The client's instructions per add (valgrind's callgrind, which counts them exactly: the figure
# does not move with the machine's load), for each Perl client given: benchmarks/perl_adds.pl run
# for 2 and for 12 rounds, the difference over the adds of the 10 rounds between. The server's
# own process is not counted (it is started by exec, which callgrind does not follow).
#
#   PATH=.venv/bin:$PATH sh benchmarks/perl_adds_instructions.sh [--mode static|dynamic]
#       [--nodes 16] [--guests 2000] LIB...
#
# e.g. sh benchmarks/perl_adds_instructions.sh /tmp/base/perl-client/lib perl-client/lib
# Needs valgrind (Debian: apt-get install valgrind).
set -eu
mode=static nodes=16 guests=2000
while [ $# -gt 0 ]; do
    case $1 in
        --mode) mode=$2; shift 2 ;;
        --nodes) nodes=$2; shift 2 ;;
        --guests) guests=$2; shift 2 ;;
        *) break ;;
    esac
done
[ $# -gt 0 ] || { echo "usage: $0 [--mode static|dynamic] [--nodes N] [--guests N] LIB..." >&2; exit 2; }
command -v valgrind >/dev/null || { echo "$0: needs valgrind (Debian: apt-get install valgrind)" >&2; exit 2; }
here=$(dirname "$0")

# Instructions of the client process (the largest count: the forks before exec count less).
count() {
    valgrind --tool=callgrind --callgrind-out-file=/dev/null perl "$here/perl_adds.pl" --lib "$1" \
        --mode "$mode" --nodes "$nodes" --guests "$guests" --rounds "$2" 2>&1 >/dev/null \
        | sed -n 's/.*Collected : \([0-9]*\).*/\1/p' | sort -n | tail -1
}

for lib in "$@"; do
    few=$(count "$lib" 2)
    many=$(count "$lib" 12)
    echo "$lib, $mode, $nodes nodes, $guests guests: $(( (many - few) / (10 * guests) )) instructions per add"
done
