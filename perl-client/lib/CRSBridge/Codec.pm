package CRSBridge::Codec;

# JSON for the crs-bridge client: a decoder chosen from the installed backends, and small
# encoders the client uses to render request messages itself (faster than building Perl
# structures first, and exact for floating point numbers).

use strict;
use warnings;

use Exporter 'import';
our @EXPORT_OK = qw(decode_json_text decode_answer json_str json_num json_int json_str_list backend JSON_NUM);

# Backends that decode floating point numbers to the nearest double. JSON::XS is left out on
# purpose: its own number parser is off by one ulp for about one value in five, which would
# change imbalances in their last bits.
my @DECODERS = ('Cpanel::JSON::XS', 'JSON::PP');

use CRSBridge::Config;

my ($BACKEND, $DECODER);

=head1 NAME

CRSBridge::Codec - JSON decoding and request encoding for the crs-bridge Perl client

=head1 FUNCTIONS

=over

=item backend()

Name of the JSON module used for decoding server answers, per the C<json> setting
(L<CRSBridge::Config>): C<auto> (default) takes C<Cpanel::JSON::XS> when installed, else
C<JSON::PP>; C<PP> forces C<JSON::PP> (for tests and benchmarks); C<XS> requires
C<Cpanel::JSON::XS>. JSON::XS is not used: it decodes some floating point numbers one unit in
the last place off.

=cut

sub backend {
    _init() if !$DECODER;
    return $BACKEND;
}

sub _init {
    my $want = CRSBridge::Config::get('json');
    my @try = $want eq 'PP' ? ('JSON::PP') : $want eq 'XS' ? ('Cpanel::JSON::XS') : @DECODERS;
    for my $module (@try) {
        (my $file = "$module.pm") =~ s{::}{/}g;
        next if !eval { require $file; 1 };
        $BACKEND = $module;
        $DECODER = $module->new->utf8(1)->allow_nonref(1);
        return;
    }
    die "crs-bridge: the json setting XS (from " . CRSBridge::Config::source('json') . ") needs Cpanel::JSON::XS,"
        . " which is not installed (install it, or choose PP or auto)\n" if $want eq 'XS';
    die "crs-bridge: no usable JSON module (tried @try)\n";
}

=item decode_json_text($bytes)

Decode one UTF-8 encoded JSON text; dies with the decoder's message on malformed input.

=cut

sub decode_json_text {
    _init() if !$DECODER;
    return $DECODER->decode($_[0]);
}

=item decode_answer($bytes)

C<decode_json_text> of one answer of the server, the same value; the answers every HA round
gets (a number: the imbalance; scored migrations whose names need no escapes) are read by
regular expressions when the backend is JSON::PP: 1 us for a number and 3 us for one scored
migration, where JSON::PP takes 20 and 45 us (a sixth of a 3 x 30 round's client CPU). Numbers are
converted as JSON::PP converts them (C<$v/1.0> with a decimal point, else C<0+$v>);
perl-client/t/codec.t holds the two to the same values. Anything else goes to the backend.

=cut

# An integer of at most 15 digits (JSON::PP keeps longer ones as strings), a fraction or an exponent.
my $NUMBER = qr/-?(?:0|[1-9][0-9]{0,14})(?:\.[0-9]+)?(?:[eE][-+]?[0-9]+)?/;
# A name of printable ASCII without quote or backslash: JSON::PP gives it as it is.
my $NAME = qr/"([^"\\\x00-\x1f\x80-\xff]*)"/;
my $SCORED = qr/\{"migration":\{"sid":$NAME,"source-node":$NAME,"target-node":$NAME\},"imbalance":($NUMBER)\}/;
# Whole results (compiled once: a pattern interpolated in a match is checked anew on each use).
my $NUMBER_RESULT = qr/\A$NUMBER\z/;
my $SCORED_LIST = qr/\A\[(?:$SCORED(?:,(?=\{)|(?=\]\z)))*\]\z/;

sub decode_answer {
    _init() if !$DECODER;
    return $DECODER->decode($_[0]) if $BACKEND ne 'JSON::PP'
        || $_[0] !~ /\A\{"jsonrpc":"2\.0","result":(.*),"id":([1-9][0-9]{0,14})\}\z/s;
    # Captures are untainted: under perl -T, values get the answer's taint back, as JSON::PP's have it.
    my $taint = substr($_[0], 0, 0);
    my ($result, $id) = ($1 . $taint, 0 + ($2 . $taint));
    return { jsonrpc => '2.0', result => _number($result), id => $id } if $result =~ $NUMBER_RESULT;
    return $DECODER->decode($_[0]) if $result !~ $SCORED_LIST;
    my @scored;
    while ($result =~ /$SCORED/g) {
        push @scored, { migration => { sid => $1 . $taint, 'source-node' => $2 . $taint, 'target-node' => $3 . $taint },
            imbalance => _number($4 . $taint) };
    }
    return { jsonrpc => '2.0', result => \@scored, id => $id };
}

sub _number {
    return index($_[0], '.') >= 0 ? $_[0] / 1.0 : 0 + $_[0];
}

my %ESCAPE = (
    '"' => '\\"', '\\' => '\\\\', "\n" => '\\n', "\r" => '\\r', "\t" => '\\t',
    "\b" => '\\b', "\f" => '\\f',
);
$ESCAPE{chr $_} //= sprintf('\\u%04x', $_) for 0 .. 0x1f;

=item json_str($string)

A JSON string literal. Characters above ASCII are kept as they are; the whole message is
encoded to UTF-8 when it is written (a byte string counts as Latin-1, as perlmod reads it).

=cut

sub json_str {
    my $s = "$_[0]";
    $s =~ s/(["\\\x00-\x1f])/$ESCAPE{$1}/g if $s =~ /["\\\x00-\x1f]/;
    return qq("$s");
}

=item json_str_list(\@strings)

A JSON array of string literals.

=cut

sub json_str_list {
    my ($list) = @_;
    return '[]' if !@$list;
    my $joined = join('","', @$list);
    # Fast path: nothing to escape, i.e. no backslash or control character, and no quote but
    # the separators' two each.
    return qq(["$joined"]) if $joined !~ /[\\\x00-\x1f]/ && ($joined =~ tr/"//) == 2 * $#$list;
    return '[' . join(',', map { json_str($_) } @$list) . ']';
}

=item json_num($number)

A JSON number that reads back as exactly the same double: 17 significant digits (trailing
zeros left out: C<0.5>, C<32>; but C<0.10000000000000001> for 0.1). The caller guarantees a
finite number. C<sprintf(JSON_NUM, $number)> is the same text, for a caller that renders one
per guest (a sub call is a fifth of its time).

=cut

# Not the shortest such text: trying 15 digits first costs a round trip check (a sprintf and a
# number parse) per number, twice the time, and a measured usage (every guest's cpu in a dynamic
# round) rarely reads back from 15 digits.
use constant JSON_NUM => '%.17g';

sub json_num {
    return sprintf(JSON_NUM, $_[0]);
}

=item json_int($integer)

A JSON integer (the caller guarantees an integral value within the accepted bounds).

=cut

sub json_int {
    return '' . int($_[0]);
}

=back

=cut

1;
