#!/usr/bin/perl
# The flight recorder's caps bound the disk it takes: under perl -T (as pve-ha-crm runs, with the
# package's config file) as without; only the recorder's own files count and go, oldest by when
# they were written (an operator's crs-keep-a.json stays, the record just written stays); an old
# record that cannot be removed is said, and then no more records are written there.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib", "$FindBin::Bin/../lib";

use File::Temp qw(tempdir);
use Test::More;
use CRSBridgeTest;
use CRSBridge::Process;
use PVE::RS::ResourceScheduling::Static;

my $LIB = "$FindBin::Bin/../lib";
my $SERVER = join(' ', @{ CRSBridge::Process::command() });

# The names in $dir, sorted.
sub listing {
    my ($dir) = @_;
    opendir(my $dh, $dir) or die "cannot list $dir: $!\n";
    return [ sort grep { !/^\.\.?$/ } readdir $dh ];
}

sub own_records { return [ grep { /^crs-\d{8}T/ } @{ listing($_[0]) } ] }

# $count HA-like rounds in this process, each dropping its object (which writes its record).
sub rounds {
    my ($count) = @_;
    for (1 .. $count) {
        my $usage = PVE::RS::ResourceScheduling::Static->new();
        $usage->add_node($_, 16, 64 * GiB) for qw(a b);
        $usage->calculate_node_imbalance;
    }
    return;
}

# An empty file $dir/$name, written $age seconds ago.
sub old_file {
    my ($dir, $name, $age) = @_;
    open(my $fh, '>', "$dir/$name") or die "cannot write $dir/$name: $!\n";
    print {$fh} "{}\n";
    close($fh);
    utime(time - $age, time - $age, "$dir/$name") or die "utime $dir/$name: $!\n";
    return;
}

subtest 'perl -T with the package config file: the caps hold' => sub {
    my $dir = tempdir(CLEANUP => 1);
    # The package's file (every key commented out) with three keys set, where the package puts
    # it (/etc/crs-bridge/crs-bridge.conf, CRSBridge::Config's default file) stood for by $config.
    my $config = "$dir/crs-bridge.conf";
    open(my $shipped, '<', "$FindBin::Bin/../../debian/crs-bridge.conf") or die "cannot read debian/crs-bridge.conf: $!\n";
    my $text = do { local $/; <$shipped> };
    open(my $fh, '>', $config) or die "cannot write $config: $!\n";
    print {$fh} $text, "command: $SERVER\nrecord: $dir/record\nrecord-max-files: 3\n";
    close($fh);
    die "the test's paths must be plain for the program below: $dir $LIB\n" if "$dir$LIB" =~ /['\\]/;
    # As pve-ha-crm: perl -T, a literal PATH, a clean environment; 20 rounds, one object each.
    my $program = "\$ENV{PATH} = '/sbin:/bin:/usr/sbin:/usr/bin'; use CRSBridge::Config;"
        . " \$CRSBridge::Config::DEFAULT_FILE = '$config'; use PVE::RS::ResourceScheduling::Static;"
        . ' print "tainted\n" if ${^TAINT};'
        . ' for (1 .. 20) { my $u = PVE::RS::ResourceScheduling::Static->new; $u->add_node("a", 16, 2**36);'
        . ' $u->calculate_node_imbalance }';
    open(my $out, '-|', 'env', '-i', 'PATH=/usr/bin:/bin', $^X, '-T', "-I$LIB", '-e', "open(STDERR, '>&', \\*STDOUT); $program")
        or die "cannot run perl: $!\n";
    my $said = do { local $/; <$out> } // '';
    close($out);
    is($said, "tainted\n", 'no warning, no error') or diag $said;
    is(scalar @{ own_records("$dir/record") }, 3, '20 records written, 3 kept (record-max-files: 3)');
};

subtest "an operator's files stay, the record just written stays" => sub {
    my $dir = tempdir(CLEANUP => 1);
    old_file($dir, "crs-keep-$_.json", 60) for qw(a b c);
    local $ENV{CRS_BRIDGE_RECORD} = $dir;
    local $ENV{CRS_BRIDGE_RECORD_MAX_FILES} = 3;
    rounds(1);
    my $first = own_records($dir);
    is(scalar @$first, 1, 'the new record is kept');
    rounds(4);
    my $now = own_records($dir);
    is(scalar @$now, 3, 'five records written, three kept');
    ok(($now->[0] // '') gt $first->[0], 'the first went first');
    is_deeply([ grep { /^crs-keep/ } @{ listing($dir) } ], [ map {"crs-keep-$_.json"} qw(a b c) ], "the operator's files are untouched");
};

subtest 'oldest by when they were written, then by name' => sub {
    my $dir = tempdir(CLEANUP => 1);
    # A record of the recorder's whose name sorts last (written with the clock set ahead), but
    # written an hour ago: the oldest.
    my $ahead = 'crs-20991231T235959.999999Z-1-1.json';
    old_file($dir, $ahead, 3600);
    old_file($dir, 'crs-20000101T000000.000000Z-1-1.json', 60);
    local $ENV{CRS_BRIDGE_RECORD} = $dir;
    local $ENV{CRS_BRIDGE_RECORD_MAX_FILES} = 2;
    rounds(1);
    my $now = own_records($dir);
    is(scalar @$now, 2, 'two kept');
    ok(!grep({ $_ eq $ahead } @$now), 'the one written first went, though its name sorts last');
    ok(grep({ $_ eq 'crs-20000101T000000.000000Z-1-1.json' } @$now), 'the next oldest stays');
};

subtest 'an old record that cannot be removed: said once, and no more records there' => sub {
    my $dir = tempdir(CLEANUP => 1);
    my $stuck = 'crs-20000101T000000.000000Z-1-1.json';
    mkdir("$dir/$stuck") or die "mkdir: $!\n";    # unlink fails on it (EISDIR), even for root
    utime(time - 60, time - 60, "$dir/$stuck");
    local $ENV{CRS_BRIDGE_RECORD} = $dir;
    local $ENV{CRS_BRIDGE_RECORD_MAX_FILES} = 1;
    my @warnings;
    local $SIG{__WARN__} = sub { push @warnings, $_[0] };
    rounds(4);
    is(scalar @warnings, 1, 'one warning for four rounds') or diag explain \@warnings;
    like($warnings[0] // '', qr{^crs-bridge: flight recorder: cannot remove the old record \Q$dir/$stuck\E \(.+\), so the caps}s,
        'saying which record and why');
    is(scalar @{ own_records($dir) }, 2, 'the stuck one and the first record: nothing more was written');
};

done_testing();
