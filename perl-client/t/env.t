#!/usr/bin/perl
# Settings by environment: imbalance formula, JSON backend, server log file.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib", "$FindBin::Bin/../lib";

use File::Temp qw(tempdir);
use Test::More;
use CRSBridgeTest;
use PVE::RS::ResourceScheduling::Dynamic;

my @NODES = ([ 1.0, 8, 2 * GiB, 32 * GiB ], [ 6.0, 8, 20 * GiB, 32 * GiB ], [ 3.0, 16, 8 * GiB, 64 * GiB ],
    [ 0.5, 16, 1 * GiB, 64 * GiB ]);

sub imbalance_with {
    my ($formula) = @_;
    local $ENV{CRS_BRIDGE_IMBALANCE} = $formula;
    my $usage = PVE::RS::ResourceScheduling::Dynamic->new();
    my $i = 0;
    for my $n (@NODES) {
        $usage->add_node('node' . ++$i, { cpu => $n->[0], maxcpu => $n->[1], mem => $n->[2], maxmem => $n->[3] });
    }
    return $usage->calculate_node_imbalance;
}

subtest 'CRS_BRIDGE_IMBALANCE' => sub {
    my $raw = imbalance_with(undef);
    cmp_ok(abs($raw - reference_imbalance(\@NODES, 'raw')), '<', 1e-12, 'default: raw, the coefficient of variation');
    is(imbalance_with('raw'), $raw, 'raw');
    my $normalized = imbalance_with('normalized');
    cmp_ok(abs($normalized - reference_imbalance(\@NODES, 'normalized')), '<', 1e-12, 'normalized');
    cmp_ok(abs($raw - $normalized * sqrt(3)), '<', 1e-12, 'raw = normalized * sqrt(n - 1)');
    is(error_of { imbalance_with('bogus') }, "crs-bridge: CRS_BRIDGE_IMBALANCE must be 'normalized' or 'raw', got 'bogus'\n",
        'a bad value');
};

# Runs a small Perl program in a child process with extra environment; returns its output.
sub perl_output {
    my ($code, %env) = @_;
    local @ENV{ keys %env } = values %env;
    my $lib = "$FindBin::Bin/../lib";
    open(my $fh, '-|', $^X, "-I$lib", '-e', $code) or die "cannot run perl: $!";
    local $/;
    my $out = <$fh>;
    close($fh);
    return $out;
}

subtest 'CRS_BRIDGE_JSON' => sub {
    my $program = 'use PVE::RS::ResourceScheduling::Dynamic; use CRSBridge::Codec;'
        . 'my $u = PVE::RS::ResourceScheduling::Dynamic->new(); my $i = 0;'
        . 'for my $n ([1.0, 8, 2 * 2**30, 32 * 2**30], [6.0, 8, 20 * 2**30, 32 * 2**30]) {'
        . ' $u->add_node("node" . ++$i, { cpu => $n->[0], maxcpu => $n->[1], mem => $n->[2], maxmem => $n->[3] }) }'
        . 'printf "%s %.17g\n", CRSBridge::Codec::backend(), $u->calculate_node_imbalance;';
    my ($pp_backend, $pp) = split ' ', perl_output($program, CRS_BRIDGE_JSON => 'PP');
    is($pp_backend, 'JSON::PP', 'CRS_BRIDGE_JSON=PP forces JSON::PP');
    SKIP: {
        skip 'Cpanel::JSON::XS is not installed', 1 if !eval { require Cpanel::JSON::XS; 1 };
        my ($xs_backend, $xs) = split ' ', perl_output($program, CRS_BRIDGE_JSON => 'XS');
        is("$xs_backend $xs", "Cpanel::JSON::XS $pp", 'Cpanel::JSON::XS decodes to the same double');
    }
    # Cpanel::JSON::XS hidden (whether installed or not): the first call says what is missing.
    my $hide = 'BEGIN { unshift @INC, sub { die "hidden\\n" if $_[1] eq "Cpanel/JSON/XS.pm"; return } }';
    my $out = perl_output("$hide use PVE::RS::ResourceScheduling::Static;"
        . 'eval { PVE::RS::ResourceScheduling::Static->new()->add_node("n1", 4, 2**30) }; print $@',
        CRS_BRIDGE_JSON => 'XS');
    like($out, qr/^crs-bridge: the json setting XS \(from CRS_BRIDGE_JSON\) needs Cpanel::JSON::XS, which is not installed/,
        'CRS_BRIDGE_JSON=XS without Cpanel::JSON::XS: the message says so');
};

subtest 'CRS_BRIDGE_LOG' => sub {
    my $dir = tempdir(CLEANUP => 1);
    my $program = 'use PVE::RS::ResourceScheduling::Static; eval { PVE::RS::ResourceScheduling::Static->new() }; print $@';
    my $out = perl_output($program, CRS_BRIDGE_LOG => "$dir/server.log",
        CRS_BRIDGE_COMMAND => qq($^X -e 'print STDERR "missing module numpy\\n"; exit 1'));
    # Two attempts (a new server that ends before answering may have been killed from outside).
    like($out, qr/ended before answering \(last lines of \Q$dir\E\/server\.log: missing module numpy \| missing module numpy\)/,
        "the server's error output is in the log and in the message");
};

done_testing();
